// Per-epoch CSV rows (what scripts/plot draws) and progress lines for batch logs.
#include "course/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "ddp/error.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on

namespace {
const char* const kHeader =
    "epoch,world_size,ranks_per_node,threads,train_loss,test_loss,test_accuracy,samples_per_s,epoch_seconds,"
    "data_seconds\n";
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append) {
  // open() rather than fopen(): the mode 0600 applies from the first byte (fopen's 0666 & umask
  // would leave the file readable by others until a chmod).
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0)
    throw Error("cannot write the metrics file " + path + ": " + std::strerror(errno),
                "choose a writable path with --metrics");
  // open()'s mode applies only to a new file: an existing one (a resumed run appends) keeps its
  // old mode, which may let others read it.
  if (::fchmod(fd, 0600) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error("cannot make the metrics file " + path + " readable by its user only: " + std::strerror(error),
                "remove the file (it belongs to someone else?) or choose another path with --metrics");
  }
  struct stat info {};
  const bool empty = ::fstat(fd, &info) == 0 && info.st_size == 0;
  file_ = ::fdopen(fd, append ? "a" : "w");
  if (file_ == nullptr) {
    ::close(fd);
    throw Error("cannot write the metrics file " + path + ": " + std::strerror(errno),
                "choose a writable path with --metrics");
  }
  if (empty) {  // a resumed run appends to the rows it wrote before: one header only
    std::fputs(kHeader, file_);
    std::fflush(file_);
  }
}

void MetricsWriter::write(const EpochMetrics& m) {
  if (file_ == nullptr) return;
  fmt::print(file_, "{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", m.epoch, m.world_size, m.ranks_per_node,
             m.threads, m.train_loss, m.test_loss, m.test_accuracy, m.samples_per_s, m.epoch_seconds, m.data_seconds);
  std::fflush(file_);  // a killed job keeps every finished epoch
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Progress::Progress(std::string prefix, int64_t total_steps, int64_t samples_per_step, int64_t every, int64_t first_step)
    : prefix_(std::move(prefix)),
      total_(total_steps),
      samples_per_step_(samples_per_step),
      every_(every),
      first_step_(first_step),
      start_(std::chrono::steady_clock::now()),
      last_(start_),
      // mpirun hands every rank a pseudo-terminal, and several ranks rewriting "one" line garble it.
      tty_(::isatty(::fileno(stdout)) != 0 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {}

void Progress::update(int64_t step, const std::function<double()>& loss) {
  // --log-every N: every N steps. Otherwise a line every 30 s, so short epochs print nothing but
  // their summary and a long one shows its progress in a batch log; a terminal gets a live line.
  const auto now = std::chrono::steady_clock::now();
  const bool due = every_ > 0 ? step % every_ == 0 || step == total_ : now - last_ >= std::chrono::seconds(30);
  const bool live = tty_ && (step == total_ || now - last_ >= std::chrono::milliseconds(200));
  if (!due && !live) return;
  last_ = now;

  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const auto done = static_cast<double>(step - first_step_);
  const double rate = elapsed > 0 ? done * static_cast<double>(samples_per_step_) / elapsed : 0;
  const double eta = done > 0 ? elapsed / done * static_cast<double>(total_ - step) : 0;
  const auto eta_s = std::max<int64_t>(0, std::llround(eta));
  const std::string line = fmt::format("{} step {}/{} | loss {:.4f} | {:.0f} samples/s | ETA {:02}:{:02}", prefix_,
                                       step, total_, loss(), rate, eta_s / 60, eta_s % 60);
  if (tty_) {
    fmt::print("\r{}\033[K", line);  // rewrite the line, clear what is left
    std::fflush(stdout);
    open_line_ = true;
  } else {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }
}

void Progress::finish() {
  if (open_line_) {
    std::fputs("\n", stdout);
    std::fflush(stdout);
    open_line_ = false;
  }
}

}  // namespace ddpw
