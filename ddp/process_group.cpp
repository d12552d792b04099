#include "ddp/process_group.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <thread>

#include "ddp/config.h"  // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/detail/collective_check.h"
#include "ddp/detail/collective_trace.h"
#include "ddp/detail/gloo_backend.h"
#include "ddp/detail/gpu_sharing.h"
#include "ddp/device.h"
#include "ddp/error.h"
#include "ddp/host.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value
#include "ddp/spawn.h"
#include "ddp/stop_signal.h"
#include "ddp/timeline.h"

#ifdef DDPW_HAVE_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // ProcessGroupNCCL.hpp is guarded by it; not every LibTorch exports it
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// 2.x defaults TCPStore to libuv, which some LibTorch builds lack; the classic server works in all.
template <typename T>
auto disable_libuv(T& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <typename T>
void disable_libuv(T&, long) {}

// Serve on a socket that is already bound and listening (spawn: the parent chose a free port and
// held it, spawn.h), as torchrun hands its socket to the store. A LibTorch without
// masterListenFd binds the port itself: the socket is closed just before, freeing the port.
template <typename T>
auto serve_on_socket(T& options, int fd, int) -> decltype(options.masterListenFd = fd, void()) {
  options.masterListenFd = fd;
}
template <typename T>
void serve_on_socket(T&, int fd, long) {
  ::close(fd);
}

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

bool contains(const std::string& text, const char* needle) { return text.find(needle) != std::string::npos; }

// How to choose another master port, in the words of whoever set this one. (Under torchrun 2.x
// the agent serves the store and rank 0 binds nothing: a taken port there is one set by hand.)
std::string other_port_hint(const LaunchEnv& launch) {
  if (launch.launcher == "options")
    return "leave out " + setting_name(Setting::kMasterPort) +
           " (the program then picks a free port), or choose another";
  return "choose another port: export MASTER_PORT=N (torchrun: --master-port N) or pass " +
         setting_value(Setting::kMasterPort, "N") + "; e.g. 20000 + job id % 20000, so jobs sharing a node differ";
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

// True once something accepts TCP connections at host:port; false when the deadline passes.
// TCPStore's client retries a failed connect once, after a backoff, each try with the full
// timeout: alone it waits about twice the rendezvous timeout for a master that never comes.
bool wait_until_listening(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  while (Clock::now() < deadline) {
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      bool ok = false;
      for (addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS) {  // wait for the answer, at most until the deadline
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
          pollfd p{fd, POLLOUT, 0};
          int err = 0;
          socklen_t len = sizeof err;
          ok = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) == 1 &&
               ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
        }
        ::close(fd);
      }
      ::freeaddrinfo(found);
      if (ok) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

c10::intrusive_ptr<c10d::Store> rendezvous(const LaunchEnv& launch, std::chrono::milliseconds timeout) {
  if (!launch.init_method.empty()) {
    const std::string path = launch.init_method.substr(std::string("file://").size());
    try {
      auto store = c10::make_intrusive<c10d::FileStore>(path, launch.world_size);
      store->setTimeout(timeout);
      return store;
    } catch (const c10::Error& e) {
      throw Error("cannot open the rendezvous file '" + path + "': " + e.what_without_backtrace(),
                  "use a fresh path per job and attempt on a filesystem every node shares, e.g. "
                  "file://$PWD/rdzv.$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0} (a requeued job keeps its id)");
    }
  }
  // No port chosen: one process serves on any free one (nobody else needs to find it); several
  // ranks must be told where to meet, and a fixed default would let two jobs on one node meet.
  if (launch.master_port == 0 && launch.world_size > 1)
    throw Error(
        "no master port for the " + std::to_string(launch.world_size) + " ranks (launcher: " + launch.launcher + ")",
        "export MASTER_PORT=N (free on the master's node, different for each job) or pass " +
            setting_value(Setting::kMasterPort, "N"));
  const std::string where = launch.master_addr + ":" + std::to_string(launch.master_port);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(launch.master_port);
  // Under torchrun the agent already serves the store: every worker is a client, and the keys of
  // each restart attempt live under their own prefix (a restarted group must not see old keys).
  options.isServer = launch.global_rank == 0 && !launch.agent_store;
  options.numWorkers = static_cast<size_t>(launch.world_size);
  options.waitWorkers = !launch.agent_store;
  options.timeout = timeout;
  disable_libuv(options, 0);
  if (options.isServer)
    if (const int fd = take_spawn_listen_socket(launch.master_port); fd >= 0) serve_on_socket(options, fd, 0);
  const auto start = Clock::now();
  const auto unreachable = [&] {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    return Error("rank " + std::to_string(launch.global_rank) + " could not reach the master at " + where + " within " +
                     fmt_seconds(waited),
                 "check MASTER_ADDR/MASTER_PORT (the first node of the job, reachable from this node), that "
                 "rank 0 started, and that no firewall blocks the port; " +
                     setting_name(Setting::kRendezvousTimeout) + " sets the wait");
  };
  if (!options.isServer) {
    if (!wait_until_listening(launch.master_addr, launch.master_port, start + timeout)) throw unreachable();
    // The master listens: TCPStore gets what is left of the wait (its first try then succeeds).
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(start + timeout - Clock::now());
    options.timeout = std::max(left, std::chrono::milliseconds(1000));
  }
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, options);
    store->setTimeout(timeout);  // later gets and waits: the full rendezvous timeout
    if (!launch.agent_store) return store;
    return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(launch.restart_count), store);
  } catch (const c10::Error& e) {
    const std::string why = e.what_without_backtrace();
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (launch.global_rank == 0 && (contains(why, "in use") || contains(why, "EADDRINUSE")))
      throw Error("master port " + std::to_string(launch.master_port) + " on " + launch.master_addr +
                      " is already in use (another job or a previous run still holds it)",
                  other_port_hint(launch));
    if (launch.global_rank == 0)
      throw Error(
          "rank 0 waited " + fmt_seconds(waited) + " at " + where + " but not all " +
              std::to_string(launch.world_size) + " ranks arrived: " + why,
          "start all ranks (check the launcher's task count) or raise " + setting_name(Setting::kRendezvousTimeout));
    throw Error("rank " + std::to_string(launch.global_rank) + " could not reach the master at " + where + " within " +
                    fmt_seconds(waited) + ": " + why,
                "check MASTER_ADDR/MASTER_PORT (the first node of the job, reachable from this node), that "
                "rank 0 started, and that no firewall blocks the port; " +
                    setting_name(Setting::kRendezvousTimeout) + " sets the wait");
  }
}

// ---- the two backends: each made in one small function ------------------------------------

// Gloo: ddp/detail/gloo_backend.h (optional: a build without its headers has no CPU ranks).

c10::intrusive_ptr<CommBackend> make_nccl_backend([[maybe_unused]] const c10::intrusive_ptr<c10d::Store>& store,
                                                  [[maybe_unused]] int rank, [[maybe_unused]] int size,
                                                  [[maybe_unused]] std::chrono::milliseconds collective_timeout) {
#ifdef DDPW_HAVE_NCCL
  // How NCCL failures reach this program (the header comment says why) is read by the constructor
  // from TORCH_NCCL_* variables: configure_process (process.h) sets this library's choice.
  auto nccl = c10d::ProcessGroupNCCL::Options::create();
  nccl->timeout = collective_timeout;  // the watchdog's limit per collective
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, nccl);
#else
  throw Error("this build has no NCCL backend (LibTorch " DDPW_TORCH_VERSION " without CUDA)",
              "build against a CUDA-enabled LibTorch, or use " + setting_value(Setting::kBackend, "gloo"));
#endif
}

// NCCL's watchdog verdict (torch >= 2.6: Backend::getError), as words; "" while all is well.
template <typename B>
std::string watchdog_verdict(B& backend) {
  if constexpr (requires { backend.getError(); }) {
    switch (static_cast<int>(backend.getError())) {  // c10d::ErrorType
      case 0: return "";
      case 1:
        return "a collective of this rank ran past the collective timeout (NCCL's watchdog aborted the communicator)";
      case 2: return "NCCL reported an error on this rank (its message is above)";
      case 3: return "another rank reported an NCCL error";
      default: return "NCCL's watchdog reports error type " + std::to_string(static_cast<int>(backend.getError()));
    }
  } else {
    return "";
  }
}

template <typename B>
void abort_comm(B& backend) {
  if constexpr (requires { backend.abort(); }) backend.abort();
}

template <typename B>
void shutdown_comm(B& backend) {
  if constexpr (requires { backend.shutdown(); }) backend.shutdown();
}

std::string text_of(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

const std::string kFailedKey = "ddpw/failed";  // the first failure's message, for the peers

// PyTorch's switch for its collective check (ProcessGroupWrapper), honoured here too.
bool debug_detail() {
  const char* level = std::getenv("TORCH_DISTRIBUTED_DEBUG");
  return level != nullptr && std::string(level) == "DETAIL";
}

}  // namespace

std::string resolve_backend(const std::string& requested, const torch::Device& device) {
  if (requested != "auto") return requested;
  return device.is_cuda() ? "nccl" : "gloo";
}

Error collective_error(const std::string& what, int rank, int size, double waited_s, double timeout_s,
                       const std::string& why, std::string hint) {
  if (hint.empty())
    hint = "another rank probably died or hangs: look for its first error above; " +
           setting_name(Setting::kCollectiveTimeout) + " sets the wait";
  return Error(what + " failed on rank " + std::to_string(rank) + " of " + std::to_string(size) + " after waiting " +
                   fmt_seconds(waited_s) + " (timeout " + fmt_seconds(timeout_s) + "): " + why,
               std::move(hint));
}

HostWaitResult wait_for_work(c10d::Work& work, const HostWaitPolicy& policy) {
  const auto start = Clock::now();
  const auto waited = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  // Not at once: asking may cost a store round trip, and most waits end within microseconds (a
  // collective that failed earlier is caught by wait() after this, from NCCL's own verdict).
  auto next_failure_check = start + policy.failure_period;
  std::optional<Clock::time_point> stop_seen;
  std::chrono::microseconds pause(0);
  for (;;) {
    if (work.isCompleted()) return {HostWaitEnd::kCompleted, waited(), ""};
    const auto now = Clock::now();
    if (policy.failure && now >= next_failure_check) {
      if (std::string why = policy.failure(); !why.empty()) return {HostWaitEnd::kFailed, waited(), why};
      next_failure_check = now + policy.failure_period;
    }
    if (now - start >= policy.timeout)
      return {HostWaitEnd::kTimedOut, waited(), "not complete within the collective timeout (a rank never joined it)"};
    if (policy.stop_requested && policy.stop_requested()) {
      if (!stop_seen) stop_seen = now;
      if (now - *stop_seen >= policy.stop_grace)
        return {HostWaitEnd::kStopGraceOver, waited(),
                "a stop was requested " + fmt_seconds(std::chrono::duration<double>(now - *stop_seen).count()) +
                    " ago and this collective is still unfinished, so no snapshot can be written now"};
    }
    // Sleep, not spin: Gloo's and NCCL's own threads need the cores. 20 us doubling to 1 ms.
    std::this_thread::sleep_for(pause);
    pause = std::min(std::max(pause * 2, std::chrono::microseconds(20)), std::chrono::microseconds(1000));
  }
}

ProcessGroup::ProcessGroup(const LaunchEnv& launch, const torch::Device& device, const ProcessGroupOptions& options)
    : rank_(launch.global_rank),
      size_(launch.world_size),
      backend_name_(resolve_backend(options.backend, device)),
      rendezvous_(launch.init_method.empty() ? launch.master_addr + ":" + std::to_string(launch.master_port)
                                             : launch.init_method),
      rendezvous_timeout_(options.rendezvous_timeout),
      collective_timeout_(options.collective_timeout),
      stop_grace_(options.stop_grace),
      serves_store_(launch.global_rank == 0 && !launch.agent_store && launch.init_method.empty()),
      loopback_master_(is_loopback(launch.master_addr)),
      check_collectives_(options.check_collectives || debug_detail()),
      collectives_at_world_size_1_(options.collectives_at_world_size_1),
      device_(device) {
  DDP_CHECK(backend_name_ != "nccl" || device.is_cuda(),
            "the NCCL backend needs a CUDA device, this rank has " + device.str(),
            "use " + setting_value(Setting::kBackend, "gloo") + " for CPU training, or " +
                setting_value(Setting::kDevice, "cuda"));

  store_ = rendezvous(launch, options.rendezvous_timeout);
  // Two processes claiming one rank (a launcher inside a launcher) would silently corrupt the group.
  if (store_->add("ddpw/rank_claimed/" + std::to_string(rank_), 1) != 1) {
    if (!launch.init_method.empty())
      throw Error("rank " + std::to_string(rank_) + " is already claimed in " + launch.init_method +
                      " (the file holds an earlier run's keys, or two processes have this rank)",
                  "give every job and every restart a fresh rendezvous file, e.g. "
                  "file://$PWD/rdzv.$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}, and start one process per rank");
    throw Error("two processes claim rank " + std::to_string(rank_) + " of the group at " + launch.master_addr + ":" +
                    std::to_string(launch.master_port),
                "start one copy of the program per rank: do not run a self-spawning program under torchrun/mpirun, "
                "and give concurrent jobs different master ports");
  }
  trace_ = std::make_unique<CollectiveTrace>(store_, rank_, size_);
  if (options.join_backend) join_backend();
}

void ProcessGroup::join_backend() {
  DDP_CHECK(!backend_, "rank " + std::to_string(rank_) + " joined the " + backend_name_ + " backend twice",
            "call join_backend() only for a group made with join_backend = false, once");
  // NCCL would stop at its first collective with "Duplicate GPU detected", naming no GPU.
  if (backend_name_ == "nccl") refuse_shared_gpus();
  auto backend_store = c10::make_intrusive<c10d::PrefixStore>(backend_name_, store_);
  const auto start = Clock::now();
  try {
    if (backend_name_ == "gloo") {
      backend_ =
          make_gloo_backend(backend_store, rank_, size_, loopback_master_, rendezvous_timeout_, collective_timeout_);
    } else
      backend_ = make_nccl_backend(backend_store, rank_, size_, collective_timeout_);
    join_collective_check();
  } catch (const c10::Error& e) {
    throw Error("rank " + std::to_string(rank_) + " could not connect the " + backend_name_ + " backend (rendezvous " +
                    rendezvous_ + ") after " +
                    fmt_seconds(std::chrono::duration<double>(Clock::now() - start).count()) + ": " +
                    e.what_without_backtrace(),
                "a rank failed to start, or the ranks cannot reach each other (GLOO_SOCKET_IFNAME / "
                "NCCL_SOCKET_IFNAME name the network interface to use)");
  }
  // Every rank arrives here or the group fails now, not at the first training step.
  barrier("the first collective after joining the group");
}

// The wrapper that numbers the collectives and, with the check on, checks them on its own Gloo group
// (CPU, whatever the backend), over the same store (collective_check.h).
void ProcessGroup::join_collective_check() {
  c10::intrusive_ptr<c10d::Backend> helper;
  if (check_collectives_)
    helper = make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>("check", store_), rank_, size_, loopback_master_,
                               rendezvous_timeout_, collective_timeout_);
  CheckedBackend::Hooks hooks;
  hooks.failing = [this](const std::string& message) {
    note_failure("rank " + std::to_string(rank_) + ": " + message, true);
  };
  hooks.fail = [this](const std::string& what, double waited_s, const std::string& why) { fail(what, waited_s, why); };
  hooks.entering = [this](int64_t seq, const std::string& what) {
    if (trace_) trace_->entering(seq, what);
  };
  numbered_ = c10::make_intrusive<CheckedBackend>(backend_, helper, collective_timeout_, host_name(), std::move(hooks));
}

CommBackend& ProcessGroup::backend() { return numbered_ ? *numbered_ : *backend_; }

// The collective's number from the wrapper that issued it; a work it did not issue (none: every
// collective goes through backend()) is filed under the group's last number.
void ProcessGroup::trace_wait(const c10d::Work& work, const std::string& what) {
  if (!trace_ || !numbered_) return;
  const int64_t seq = numbered_->number_of(work);
  trace_->entering(seq > 0 ? seq : numbered_->issued(), what);
}

void ProcessGroup::refuse_shared_gpus() {
  const auto rows = all_gather_strings(host_name() + "\t" + gpu_bus_id(device_) + "\t" + machine_id());
  std::vector<GpuClaim> claims;
  for (const auto& row : rows) {  // host, bus id, machine
    const auto tab = row.find('\t');
    const auto tab2 = tab == std::string::npos ? tab : row.find('\t', tab + 1);
    claims.push_back({row.substr(0, tab), tab == std::string::npos ? "" : row.substr(tab + 1, tab2 - tab - 1),
                      tab2 == std::string::npos ? "" : row.substr(tab2 + 1)});
  }
  const SharingVerdict verdict = judge_gpu_sharing(backend_name_, claims);
  if (verdict.refused) throw Error(verdict.what, verdict.hint);
}

ProcessGroup::~ProcessGroup() {
  // Unwinding from an exception: this rank is failing, whatever the group's last call said.
  if (std::uncaught_exceptions() > 0 && !failed_)
    note_failure("rank " + std::to_string(rank_) + " stopped with an error (its message is in its output)", true);
  shutdown();
}

void ProcessGroup::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (trace_) trace_->stop();           // before the store may go
  if (failed_) return abort_backend();  // NCCL only; the peers learnt of it from the store
  try {
    if (backend_ && backend_name_ == "nccl") {
      // 1. This rank's queued work is done (or, stuck, has been aborted by the watchdog).
      torch::cuda::synchronize(device_.index());
      if (std::string why = group_failure(); !why.empty()) throw Error("the group failed: " + why);
      // 2. Every rank is here: no collective is in flight anywhere.
      store_barrier("arrived", size_, /*count_me=*/true, /*wait_here=*/true, collective_timeout_);
      // 3. Finalize and destroy the communicators (ncclCommFinalize flushes the last sends).
      shutdown_comm(*backend_);
    }
    // 4. The others use the store until they leave (a last gather, NCCL's threads): rank 0, whose
    //    TCPStore serves it, goes last. Bounded: a peer that died silently must not hold it long.
    if (size_ > 1)
      store_barrier("departed", size_ - 1, /*count_me=*/rank_ != 0, /*wait_here=*/serves_store_,
                    std::min(collective_timeout_, std::chrono::milliseconds(std::chrono::seconds(60))));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] warning: the process group did not shut down cleanly (%s)%s\n", rank_,
                 text_of(e).c_str(), backend_name_ == "nccl" ? "; aborting NCCL" : "");
    abort_backend();
  }
}

// A barrier through the store: the ranks that count add themselves to "<name>", the one that makes
// it `expected` sets "<name>/all", and those that wait here wait for that, at most `timeout`. A
// failure a rank published ends the wait at once.
void ProcessGroup::store_barrier(const std::string& name, int expected, bool count_me, bool wait_here,
                                 std::chrono::milliseconds timeout) {
  const std::string key = "ddpw/exit/" + name;
  if (count_me && store_->add(key, 1) == expected) store_->set(key + "/all", std::vector<uint8_t>{1});
  if (!wait_here) return;
  const auto deadline = Clock::now() + timeout;
  while (!store_->check({key + "/all"})) {
    if (store_->check({kFailedKey})) {
      const auto bytes = store_->get(kFailedKey);
      throw Error("a rank failed while the others were leaving: " + std::string(bytes.begin(), bytes.end()));
    }
    if (Clock::now() > deadline)
      throw Error(std::to_string(store_->add(key, 0)) + " of " + std::to_string(expected) + " ranks " + name +
                  " within " + fmt_seconds(seconds(timeout)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ProcessGroup::abort_backend() noexcept {
  if (aborted_ || !backend_) return;
  aborted_ = true;
  try {
    abort_comm(*backend_);  // releases GPU work stuck behind a collective; no destroy warning later
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] warning: aborting NCCL failed: %s\n", rank_, text_of(e).c_str());
  }
}

// A failed collective leaves the group unusable: NCCL's communicator is aborted at once (releasing
// the GPU work stuck behind it), and the peers are told through the store (the NCCL ranks waiting
// on the host fail at once; every rank stops waiting for this one to leave).
void ProcessGroup::note_failure(const std::string& message, bool publish) noexcept {
  failed_ = true;
  if (publish) {
    try {
      if (!store_->check({kFailedKey})) store_->set(kFailedKey, std::vector<uint8_t>(message.begin(), message.end()));
    } catch (const std::exception&) {  // the store is gone too: the peers will find out themselves
    }
  }
  if (backend_name_ == "nccl") abort_backend();
}

void ProcessGroup::fail(const std::string& what, double waited_s, const std::string& why, bool publish) {
  note_failure("rank " + std::to_string(rank_) + ": " + what + " failed: " + why, publish);
  const std::string others = trace_ ? trace_->report() : "";
  throw collective_error(what, rank_, size_, waited_s, seconds(collective_timeout_),
                         others.empty() ? why
                                        : why + (why.empty() || why.back() == '.' || why.back() == '!' ? " " : ". ") +
                                              "Where the ranks are: " + others);
}

std::string ProcessGroup::group_failure() {
  if (backend_name_ != "nccl" || !backend_) return "";
  if (std::string verdict = watchdog_verdict(*backend_); !verdict.empty()) return verdict;
  try {
    if (!store_->check({kFailedKey})) return "";
    const auto bytes = store_->get(kFailedKey);
    return std::string(bytes.begin(), bytes.end());
  } catch (const c10::Error& e) {
    return "the rendezvous store at " + rendezvous_ +
           " stopped answering (its server, rank 0 or the launcher, is "
           "gone?): " +
           e.what_without_backtrace();
  }
}

// NCCL takes only tensors on its GPU and says so in LibTorch's words ("Tensors must be CUDA and
// dense"), without the call; every backend gets the library's convention, with the call named.
void ProcessGroup::check_on_device(const std::vector<torch::Tensor>& tensors, const std::string& what) const {
  for (const auto& t : tensors)
    DDP_CHECK(t.device() == device_,
              what + ": a tensor on " + t.device().str() + " was handed to the process group, whose tensors live on " +
                  device_.str() + " (rank " + std::to_string(rank_) + ")",
              "make the tensor on the group's device (torch::TensorOptions().device(pg.device()), or "
              ".to(pg.device())): NCCL takes only tensors on its GPU");
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_sum_async(std::vector<torch::Tensor>& tensors) {
  check_on_device(tensors, "allreduce");
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;  // Gloo has no AVG: callers divide
  return backend().allreduce(tensors, options);
}

void ProcessGroup::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  trace_wait(*work, what);
  finish_wait(work, what);
}

void ProcessGroup::finish_wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  const auto start = Clock::now();
  try {
    // NCCL: wait() only makes this thread's stream wait (the GPU keeps overlapping); its watchdog
    // enforces the timeout. A wait with a timeout would block the host, polling every millisecond.
    if (backend_name_ == "nccl")
      work->wait();
    else
      work->wait(collective_timeout_);
  } catch (const std::exception& e) {
    fail(what, std::chrono::duration<double>(Clock::now() - start).count(), text_of(e));
  }
  if (backend_name_ == "nccl")
    if (std::string verdict = watchdog_verdict(*backend_); !verdict.empty()) fail(what, 0, verdict);
}

void ProcessGroup::wait_on_host(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  trace_wait(*work, what);
  HostWaitPolicy policy;
  policy.timeout = collective_timeout_;
  policy.stop_grace = stop_grace_;
  policy.failure = [this] { return group_failure(); };
  policy.stop_requested = [] { return stop_requested(); };
  HostWaitResult r;
  try {
    r = wait_for_work(*work, policy);
  } catch (const std::exception& e) {
    fail(what, 0, text_of(e));
  }
  switch (r.end) {
    case HostWaitEnd::kCompleted: return finish_wait(work, what);  // a failed work throws its own error here
    case HostWaitEnd::kFailed:                                     // a peer's published failure is not published again
      fail(what, r.waited_s, r.why, /*publish=*/r.why.rfind("rank ", 0) != 0);
    case HostWaitEnd::kTimedOut: fail(what, r.waited_s, r.why);
    case HostWaitEnd::kStopGraceOver:
      note_failure("rank " + std::to_string(rank_) + ": stopped (" + stop_reason() + ") inside " + what, true);
      throw collective_error(what, rank_, size_, r.waited_s, seconds(collective_timeout_), r.why,
                             "the last snapshot stands: resubmit to resume from it. A rank that does not reach "
                             "this collective (look for its error) keeps the others from stopping at one step");
  }
}

void ProcessGroup::allreduce_sum(torch::Tensor& tensor, const std::string& what) {
  std::vector<torch::Tensor> tensors{tensor};
  check_on_device(tensors, what);
  auto work = allreduce_sum_async(tensors);
  record_collective(work, what, tensor.numel() * static_cast<int64_t>(tensor.element_size()));  // timeline.h
  backend_name_ == "nccl" ? wait_on_host(work, what) : wait(work, what);
}

void ProcessGroup::broadcast(std::vector<torch::Tensor>& tensors, int root, const std::string& what) {
  check_on_device(tensors, what);
  c10d::BroadcastOptions options;
  options.rootRank = root;
  auto work = backend().broadcast(tensors, options);
  backend_name_ == "nccl" ? wait_on_host(work, what) : wait(work, what);
}

// NCCL: the host waits until the allreduce is complete, which on NCCL's stream comes after all the
// work queued before it on this rank's stream (PyTorch's NCCL barrier synchronizes that stream).
void ProcessGroup::barrier(const std::string& what) {
  auto token = torch::zeros({1}, torch::TensorOptions().device(device_));
  allreduce_sum(token, what);
}

std::vector<std::string> ProcessGroup::all_gather_strings(const std::string& mine) {
  const std::string prefix = "ddpw/gather/" + std::to_string(gather_round_++) + "/";
  store_->set(prefix + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> all;
  for (int r = 0; r < size_; ++r) {
    try {
      const auto bytes = store_->get(prefix + std::to_string(r));
      all.emplace_back(bytes.begin(), bytes.end());
    } catch (const c10::Error& e) {
      throw Error("rank " + std::to_string(rank_) + " timed out waiting for rank " + std::to_string(r) +
                      " to report: " + e.what_without_backtrace(),
                  "that rank died or is stuck; look for its first error above");
    }
  }
  return all;
}

bool any_rank(ProcessGroup* pg, bool mine) {
  if (!pg) return mine;
  auto flag = torch::tensor({mine ? 1.0f : 0.0f}).to(pg->device());
  pg->allreduce_sum(flag, "stop agreement");
  return flag.item<float>() > 0;
}

std::shared_ptr<ProcessGroup> init_process_group(const LaunchEnv& launch, const torch::Device& device,
                                                 const ProcessGroupOptions& options) {
  return std::make_shared<ProcessGroup>(launch, device, options);
}

}  // namespace ddp
