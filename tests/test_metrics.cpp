// MetricsWriter (CSV header once, one row per epoch, user-only file) and Progress (plain lines in
// a log, one rewritten line on a terminal).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "course/metrics.h"
#include "ddp/error.h"

namespace {

// POSIX calls rather than std::filesystem: this test may be linked with LibTorch, whose wheels
// export an older copy of parts of std::filesystem (pytorch/pytorch#133437).
const char* const kHeader =
    "epoch,world_size,ranks_per_node,threads,train_loss,test_loss,test_accuracy,samples_per_s,epoch_seconds,"
    "data_seconds";

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string temp_path(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/ddpw_metrics_" + std::to_string(::getpid()) + "_" +
         name;
}

ddpw::EpochMetrics row(int64_t epoch) {
  ddpw::EpochMetrics m;
  m.epoch = epoch;
  m.world_size = 4;
  m.ranks_per_node = 2;
  m.threads = 3;
  m.train_loss = 0.5;
  m.test_loss = 0.25;
  m.test_accuracy = 0.875;
  m.samples_per_s = 1234.5;
  m.epoch_seconds = 12.5;
  m.data_seconds = 0.25;
  return m;
}

TEST(MetricsWriter, HeaderOnceAndOneRowPerEpochAcrossAppends) {
  const auto path = temp_path("append.csv");
  std::remove(path.c_str());
  {
    ddpw::MetricsWriter writer(path, /*append=*/true);
    writer.write(row(0));
    // Flushed at once: a killed job keeps its rows.
    const auto lines = read_lines(path);
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0], kHeader);
    EXPECT_EQ(lines[1], "0,4,2,3,0.5,0.25,0.875,1234.5,12.5,0.25");
  }
  {
    ddpw::MetricsWriter resumed(path, /*append=*/true);  // a resumed run adds rows, no second header
    resumed.write(row(1));
    resumed.write(row(2));
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], kHeader);
  EXPECT_EQ(lines[2].substr(0, 2), "1,");
  EXPECT_EQ(lines[3].substr(0, 2), "2,");
  std::remove(path.c_str());
}

TEST(MetricsWriter, FreshRunStartsAgain) {
  const auto path = temp_path("fresh.csv");
  {
    ddpw::MetricsWriter writer(path, true);
    writer.write(row(0));
    writer.write(row(1));
  }
  {
    ddpw::MetricsWriter writer(path, /*append=*/false);
    writer.write(row(0));
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], kHeader);
  std::remove(path.c_str());
}

TEST(MetricsWriter, FileIsReadableByTheUserOnly) {
  const auto path = temp_path("mode.csv");
  std::remove(path.c_str());
  const mode_t old_mask = ::umask(0);  // even with a permissive umask
  {
    ddpw::MetricsWriter writer(path, true);
    writer.write(row(0));
  }
  ::umask(old_mask);
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  std::remove(path.c_str());
}

TEST(MetricsWriter, AnExistingFileBecomesUserOnlyToo) {
  // A resumed run appends to the file an earlier run (or a copy, or another tool) left behind.
  const auto path = temp_path("mode-existing.csv");
  std::remove(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fchmod(fd, 0644), 0);
  ::close(fd);
  for (const bool append : {true, false}) {
    ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
    {
      ddpw::MetricsWriter writer(path, append);
      writer.write(row(0));
    }
    struct stat info {};
    ASSERT_EQ(::stat(path.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600u) << (append ? "append" : "truncate");
  }
  std::remove(path.c_str());
}

TEST(MetricsWriter, DefaultWriterWritesNothing) {
  ddpw::MetricsWriter writer;
  writer.write(row(0));  // no file, no crash
  SUCCEED();
}

TEST(MetricsWriter, UnwritablePathIsAnErrorNamingIt) {
  const std::string path = "/nonexistent-dir-ddpw/metrics.csv";
  try {
    ddpw::MetricsWriter writer(path, true);
    FAIL() << "no error";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("--metrics"), std::string::npos) << e.hint();
  }
}

// Runs `body` with stdout sent to `fd`, then restores it.
template <typename F>
void with_stdout(int fd, F body) {
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(fd, STDOUT_FILENO);
  body();
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

TEST(Progress, PlainLinesInALogFile) {
  const auto path = temp_path("progress.log");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  with_stdout(fd, [] {
    ddpw::Progress progress("[GPU0] Epoch 3", /*total_steps=*/8, /*samples_per_step=*/32, /*every=*/2);
    for (int64_t step = 1; step <= 8; ++step) progress.update(step, 1.0 / static_cast<double>(step));
    progress.finish();
  });
  ::close(fd);
  const std::string out = slurp(path);
  EXPECT_EQ(out.find('\r'), std::string::npos) << "terminal codes in a log file";
  EXPECT_EQ(out.find('\033'), std::string::npos) << "terminal codes in a log file";
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << out;  // every = 2: steps 2, 4, 6, 8
  const std::regex format(R"(\[GPU0\] Epoch 3 step (\d+)/8 \| loss ([0-9.]+) \| (\d+) samples/s \| ETA (\d\d):(\d\d))");
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, format)) << lines[i];
    EXPECT_EQ(std::stoi(m[1]), static_cast<int>(2 * (i + 1)));
    EXPECT_NEAR(std::stod(m[2]), 1.0 / (2.0 * static_cast<double>(i + 1)), 1e-4);
  }
  EXPECT_TRUE(lines.back().ends_with("ETA 00:00")) << lines.back();
  std::remove(path.c_str());
}

TEST(Progress, DefaultIsQuietForShortEpochsInALogFile) {
  const auto path = temp_path("progress0.log");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  with_stdout(fd, [] {
    ddpw::Progress progress("q", 100, 1, /*every=*/0);  // a line every 30 s: none in a fast epoch
    for (int64_t step = 1; step <= 100; ++step) progress.update(step, 0.5);
    progress.finish();
  });
  ::close(fd);
  EXPECT_EQ(slurp(path), "");
  std::remove(path.c_str());
}

TEST(Progress, ExplicitIntervalAndLastStep) {
  const auto path = temp_path("progress3.log");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  with_stdout(fd, [] {
    ddpw::Progress progress("p", 10, 1, 3);
    for (int64_t step = 1; step <= 10; ++step) progress.update(step, 0.5);
  });
  ::close(fd);
  const std::string out = slurp(path);
  EXPECT_NE(out.find("p step 3/10 "), std::string::npos) << out;
  EXPECT_NE(out.find("p step 9/10 "), std::string::npos) << out;
  EXPECT_NE(out.find("p step 10/10 "), std::string::npos) << out;  // the last step always shows
  EXPECT_EQ(out.find("p step 4/10 "), std::string::npos) << out;
  std::remove(path.c_str());
}

TEST(Progress, OneRewrittenLineOnATerminal) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) GTEST_SKIP() << "no pseudo-terminal available";
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  with_stdout(slave, [] {
    ddpw::Progress progress("tty", 4, 8, 0);
    for (int64_t step = 1; step <= 4; ++step) progress.update(step, 0.25);
    progress.finish();
  });
  ::close(slave);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(master, buffer, sizeof buffer)) > 0;) {
    out.append(buffer, static_cast<size_t>(n));
    if (out.find('\n') != std::string::npos) break;  // finish() ends the line
  }
  ::close(master);
  EXPECT_NE(out.find("\rtty step 4/4 "), std::string::npos) << out;
  // One line in all: the only newline is the one finish() writes (the terminal may add a \r).
  const auto newline = out.find('\n');
  ASSERT_NE(newline, std::string::npos) << out;
  EXPECT_GT(newline, out.find("step 4/4")) << out;
}

}  // namespace
