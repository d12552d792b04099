#include "diagnostics/preflight.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "ddp/error.h"
#include "ddp/files.h"

namespace diagnostics {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Attempt {
  bool connected = false;
  bool unresolvable = false;   // the name does not exist: retrying will not help
  bool lookup_failed = false;  // no answer about the name (EAI_AGAIN): the name server may come back
  std::string reason;          // why it failed, e.g. "Connection refused"
};

// One TCP connect to host:port, given at most `limit` to complete.
Attempt try_connect(const std::string& host, int port, milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0)
    return {false, rc == EAI_NONAME || rc == EAI_FAIL, true,
            std::string("cannot resolve the host name: ") + gai_strerror(rc)};
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);

  Attempt attempt;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {  // IPv4 and IPv6 addresses
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      attempt.reason = std::strerror(errno);
      continue;
    }
    int error = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {  // non-blocking: wait for the handshake, but not forever
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(limit.count()));
      socklen_t len = sizeof error;
      if (ready == 0)
        error = ETIMEDOUT;
      else if (ready < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0)
        error = errno;
    }
    ::close(fd);  // a connect-and-close is harmless to the rendezvous server
    if (error == 0) return {true, false, false, ""};
    attempt.reason = std::strerror(error);
  }
  return attempt;
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

double wait_for_master(const ddp::LaunchEnv& launch, milliseconds timeout) {
  const std::string where = launch.master_addr + ":" + std::to_string(launch.master_port);
  const std::string who = "rank " + std::to_string(launch.global_rank) + " on " + this_host();
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  bool told = false;
  Attempt last;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    last = try_connect(launch.master_addr, launch.master_port, std::clamp(left, milliseconds(1), milliseconds(2000)));
    if (last.connected) return seconds_since(start);
    if (last.unresolvable)
      throw ddp::Error(who + " cannot reach the master " + where + ": " + last.reason,
                       "set MASTER_ADDR (or --master-addr) to a name or address every node resolves, "
                       "e.g. export MASTER_ADDR=$(hostname -s) on the job's first node");
    if (Clock::now() >= deadline) break;
    // Rank 0 may simply not be listening yet; say once in the log that we are waiting, and why.
    if (!told && seconds_since(start) > 5) {
      std::fprintf(stderr, "[RANK %d] master %s not reachable yet (%s); retrying for up to %.0f s\n",
                   launch.global_rank, where.c_str(), last.reason.c_str(), timeout.count() / 1000.0);
      told = true;
    }
    std::this_thread::sleep_for(
        std::min(milliseconds(250), std::chrono::duration_cast<milliseconds>(deadline - Clock::now())));
  }

  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f s", seconds_since(start));
  const bool refused = last.reason == std::strerror(ECONNREFUSED);
  throw ddp::Error(
      who + " could not reach the master " + where + " within " + waited + ": " + last.reason,
      last.lookup_failed
          ? "the name server gave no answer for that name: set MASTER_ADDR (or --master-addr) to rank 0's IP "
            "address, or to a name this node resolves (getent hosts NAME)"
      : refused ? "nothing listens there: start rank 0 on that host with the same MASTER_PORT; under Slurm "
                  "MASTER_ADDR is the job's first node (scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1); "
                  "--rendezvous-timeout sets how long to wait"
                : "no answer from that address: check MASTER_ADDR is rank 0's node on a network all nodes "
                  "share, and that no firewall blocks MASTER_PORT; --rendezvous-timeout sets how long to wait");
}

void check_master_is_here(const ddp::LaunchEnv& launch) {
  const std::string fix =
      "export MASTER_ADDR=$(hostname -s) on the node of rank 0 (the job's first node), "
      "or pass --master-addr";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(launch.master_addr.c_str(), nullptr, &hints, &found); rc != 0)
    throw ddp::Error(
        "rank 0 on " + this_host() + " cannot resolve MASTER_ADDR " + launch.master_addr + ": " + gai_strerror(rc),
        fix);
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    // An address is this host's when a socket can bind to it (port 0: any free port).
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool local = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
    if (local) return;
  }
  throw ddp::Error("rank 0 runs on " + this_host() + ", but MASTER_ADDR " + launch.master_addr +
                       " is not an address of this host, so the other ranks would look for the master elsewhere",
                   fix);
}

void check_init_file(const std::string& init_method) {
  const std::string file = init_method.substr(std::string("file://").size());
  const std::string dir = ddp::parent_dir(file);
  DDP_CHECK(ddp::is_directory(dir), "rendezvous file " + file + ": folder " + dir + " does not exist on " + this_host(),
            "use a folder on a filesystem every node shares (e.g. file://$PWD/rdzv.$SLURM_JOB_ID)");
  DDP_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0,
            "rendezvous file " + file + ": folder " + dir + " is not writable on " + this_host(),
            "choose a folder you can write, on a filesystem every node shares");
}

std::string idle_gpus_warning(int ranks_on_node, int visible_gpus) {
  if (ranks_on_node >= visible_gpus) return "";
  const int idle = visible_gpus - ranks_on_node;
  return std::to_string(ranks_on_node) + " rank(s) on " + this_host() + " but " + std::to_string(visible_gpus) +
         " GPUs visible: " + std::to_string(idle) +
         " GPU(s) sit idle (fix: one rank per GPU, "
         "--ntasks-per-node / --nproc_per_node = GPUs per node, or request only the GPUs you use)";
}

}  // namespace diagnostics
