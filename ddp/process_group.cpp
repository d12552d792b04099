#include "ddp/process_group.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "ddp/error.h"
#include "ddp/gloo_backend.h"
#include "ddp/spawn.h"

#ifdef DDPW_HAVE_NCCL
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

// Serve on a socket that is already bound and listening (step 1: the parent chose a free port and
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
  if (launch.launcher == "options") return "leave out --master-port (step 1 then picks a free port), or choose another";
  return "choose another port: export MASTER_PORT=N (torchrun: --master-port N) or pass --master-port N; "
         "e.g. 20000 + job id % 20000, so jobs sharing a node differ";
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// True once something accepts TCP connections at host:port; false when the deadline passes.
// TCPStore's client retries a failed connect once, after a backoff, each try with the full
// timeout: alone it waits about twice --rendezvous-timeout for a master that never comes.
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
#if TORCH_VERSION_MAJOR < 2
  // torchrun >= 2.0 serves its store with a newer wire protocol (a VALIDATE request first, every
  // opcode shifted by one): a 1.x client gets resets, wrong answers or hangs. Let rank 0 serve.
  if (launch.agent_store)
    throw Error("LibTorch " DDPW_TORCH_VERSION " cannot use torchrun's own store (TORCHELASTIC_USE_AGENT_STORE=True)",
                "launch with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone (or --rdzv-backend=c10d); "
                "then rank 0 of this program serves the store");
#endif
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
    return Error("rank " + std::to_string(launch.global_rank) + " could not reach the master at " + where +
                     " within " + fmt_seconds(waited),
                 "check MASTER_ADDR/MASTER_PORT (the first node of the job, reachable from this node), that "
                 "rank 0 started, and that no firewall blocks the port; --rendezvous-timeout sets the wait");
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
      throw Error("rank 0 waited " + fmt_seconds(waited) + " at " + where + " but not all " +
                      std::to_string(launch.world_size) + " ranks arrived: " + why,
                  "start all ranks (check the launcher's task count) or raise --rendezvous-timeout");
    throw Error("rank " + std::to_string(launch.global_rank) + " could not reach the master at " + where +
                    " within " + fmt_seconds(waited) + ": " + why,
                "check MASTER_ADDR/MASTER_PORT (the first node of the job, reachable from this node), that "
                "rank 0 started, and that no firewall blocks the port; --rendezvous-timeout sets the wait");
  }
}

}  // namespace

ProcessGroup::ProcessGroup(const LaunchEnv& launch, const torch::Device& device, const ProcessGroupOptions& options)
    : rank_(launch.global_rank),
      size_(launch.world_size),
      collective_timeout_(options.collective_timeout),
      device_(device) {
  backend_name_ = options.backend;
  if (backend_name_ == "auto") backend_name_ = device.is_cuda() ? "nccl" : "gloo";
  DDP_CHECK(backend_name_ != "nccl" || device.is_cuda(), "the NCCL backend needs a CUDA device, this rank has " + device.str(),
            "use --backend gloo for CPU training, or --device cuda");

  // A worker must not outlive the launcher that started it (torchrun killed by a time limit).
  if (launch.launcher == "torchrun") ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // When a peer dies, Gloo's next write to its socket raises SIGPIPE, which by default ends this
  // process at once and silently (exit -13) instead of failing the collective with an error that
  // names it. Python ignores SIGPIPE at start-up, so Python DDP never meets this; we do the same.
  ::signal(SIGPIPE, SIG_IGN);
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
  auto backend_store = c10::make_intrusive<c10d::PrefixStore>(backend_name_, store_);
  const auto start = Clock::now();
  try {
    if (backend_name_ == "gloo") {
      backend_ = make_gloo_backend(backend_store, rank_, size_, is_loopback(launch.master_addr), options);
    } else {
#ifdef DDPW_HAVE_NCCL
      auto nccl = c10d::ProcessGroupNCCL::Options::create();
      nccl->timeout = options.collective_timeout;
      backend_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(backend_store, rank_, size_, nccl);
#else
      throw Error("this build has no NCCL backend (LibTorch " DDPW_TORCH_VERSION " without CUDA)",
                  "build against a CUDA-enabled LibTorch, or use --backend gloo");
#endif
    }
  } catch (const c10::Error& e) {
    const std::string through = launch.init_method.empty()
                                    ? launch.master_addr + ":" + std::to_string(launch.master_port)
                                    : launch.init_method;
    throw Error("rank " + std::to_string(rank_) + " could not connect the " + backend_name_ + " backend (rendezvous " +
                    through + ") after " +
                    fmt_seconds(std::chrono::duration<double>(Clock::now() - start).count()) + ": " +
                    e.what_without_backtrace(),
                "a rank failed to start, or the ranks cannot reach each other (GLOO_SOCKET_IFNAME / "
                "NCCL_SOCKET_IFNAME name the network interface to use)");
  }
  // Every rank arrives here or the group fails now, not at the first training step.
  if (options.barrier_on_join) barrier("the first collective after joining the group");
}

ProcessGroup::~ProcessGroup() = default;

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_sum_async(std::vector<torch::Tensor>& tensors) {
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;  // Gloo has no AVG: callers divide
  return backend_->allreduce(tensors, options);
}

void ProcessGroup::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  const auto start = Clock::now();
  try {
    // NCCL: wait() only orders the streams (the GPU keeps overlapping); its watchdog enforces the
    // collective timeout. A wait with a timeout would block the CPU, polling every millisecond.
    if (backend_name_ == "nccl")
      work->wait();
    else
      work->wait(collective_timeout_);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) why = ce->what_without_backtrace();
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    throw Error(what + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " after waiting " +
                    fmt_seconds(waited) + " (timeout " + fmt_seconds(seconds(collective_timeout_)) + "): " + why,
                "another rank probably died or hangs: look for its first error above; "
                "--collective-timeout sets the wait");
  }
}

void ProcessGroup::allreduce_sum(torch::Tensor& tensor, const std::string& what) {
  std::vector<torch::Tensor> tensors{tensor};
  wait(allreduce_sum_async(tensors), what);
}

void ProcessGroup::broadcast(std::vector<torch::Tensor>& tensors, int root, const std::string& what) {
  c10d::BroadcastOptions options;
  options.rootRank = root;
  wait(backend_->broadcast(tensors, options), what);
}

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

ProcessGroupOptions process_group_options(const Options& o) {
  ProcessGroupOptions p;
  p.backend = o.backend;
  p.rendezvous_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.rendezvous_timeout_s * 1000));
  p.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  return p;
}

std::shared_ptr<ProcessGroup> init_process_group(const LaunchEnv& launch, const torch::Device& device,
                                                 const ProcessGroupOptions& options) {
  return std::make_shared<ProcessGroup>(launch, device, options);
}

}  // namespace ddp
