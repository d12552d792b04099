#include "ddp/spawn.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "ddp/error.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

extern char** environ;

namespace ddp {
namespace {

constexpr const char* kRankVar = "DDPW_SPAWN_RANK";
constexpr const char* kParentVar = "DDPW_SPAWN_PARENT";
constexpr const char* kPortVar = "DDPW_SPAWN_MASTER_PORT";    // every worker: the port to meet at
constexpr const char* kListenFdVar = "DDPW_SPAWN_LISTEN_FD";  // rank 0 only: the socket bound to it
constexpr const char* kPrefix = "DDPW_SPAWN_";                // a parent's own values are not passed on

// The listening socket this process holds for spawn_master_port(), and its port.
int g_listen_fd = -1;
int g_listen_port = 0;

// The children, for the signal handler that passes signals on.
constexpr int kMaxChildren = 1024;
volatile sig_atomic_t g_child_count = 0;
pid_t g_children[kMaxChildren];

void forward_signal(int sig) {
  for (int i = 0; i < g_child_count; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], sig);
}

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  return args;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended with status " + std::to_string(status);
}

// Binds a TCP socket on the loopback interface to a port the kernel chooses, and listens (the
// workers all run on this host). Close-on-exec: only rank 0 gets a copy (start_worker).
void bind_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw Error(std::string("cannot create a socket for the rendezvous: ") + std::strerror(errno),
                "check the open-file limit (ulimit -n), or pass " + setting_value(Setting::kMasterPort, "N"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 1024) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(std::string("cannot bind a free port on 127.0.0.1 for the rendezvous: ") + std::strerror(err),
                "check that the loopback interface is up, or pass " + setting_value(Setting::kMasterPort, "N"));
  }
  g_listen_fd = fd;
  g_listen_port = ntohs(addr.sin_port);
}

pid_t start_worker(int rank, const std::vector<std::string>& args) {
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, kPrefix, std::strlen(kPrefix)) == 0) continue;
    env_strings.emplace_back(*e);
  }
  env_strings.push_back(std::string(kRankVar) + "=" + std::to_string(rank));
  env_strings.push_back(std::string(kParentVar) + "=" + std::to_string(::getpid()));
  // Rank 0 inherits the bound socket (a copy without close-on-exec), so its store serves on it:
  // the port is never free between choosing and serving. The parent's own copy is closed below.
  int inherited = -1;
  if (g_listen_port > 0) {
    env_strings.push_back(std::string(kPortVar) + "=" + std::to_string(g_listen_port));
    if (rank == 0 && g_listen_fd >= 0) {
      inherited = ::dup(g_listen_fd);  // dup() clears close-on-exec on the copy
      if (inherited < 0)
        throw Error(std::string("cannot pass the rendezvous socket to rank 0: ") + std::strerror(errno),
                    "check the open-file limit (ulimit -n), or pass " + setting_value(Setting::kMasterPort, "N"));
      env_strings.push_back(std::string(kListenFdVar) + "=" + std::to_string(inherited));
    }
  }
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_copy = args;
  for (auto& s : args_copy) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data());
  if (inherited >= 0) {  // rank 0 holds the socket now; a later worker must not
    ::close(inherited);
    ::close(g_listen_fd);
    g_listen_fd = -1;
  }
  if (rc != 0)
    throw Error("cannot start worker " + std::to_string(rank) + ": " + std::strerror(rc),
                "check the process limit (ulimit -u) and that the program file still exists");
  return pid;
}

int run_parent(int nprocs) {
  if (nprocs > kMaxChildren) throw Error("too many workers", "use at most 1024");
  const auto args = own_arguments();
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) ::sigaction(sig, &sa, nullptr);

  std::vector<pid_t> pids;
  for (int rank = 0; rank < nprocs; ++rank) {
    pids.push_back(start_worker(rank, args));
    g_children[rank] = pids.back();
    g_child_count = rank + 1;
  }

  int running = nprocs, exit_code = kExitOk;
  std::string failure;
  std::chrono::steady_clock::time_point kill_deadline{};
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, failure.empty() ? 0 : WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {  // others still running after a failure: SIGKILL them when the grace is over
      if (std::chrono::steady_clock::now() > kill_deadline) forward_signal(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    int rank = -1;
    for (int r = 0; r < nprocs; ++r)
      if (pids[r] == pid) rank = r, g_children[r] = -1;
    if (rank < 0) continue;
    --running;
    const bool requeue = WIFEXITED(status) && WEXITSTATUS(status) == kExitRequeue;
    if (requeue && exit_code == kExitOk) exit_code = kExitRequeue;
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || requeue) continue;
    if (failure.empty()) {
      failure = "worker rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ") " + describe_status(status);
      exit_code = kExitError;
      forward_signal(SIGTERM);  // the others: end now, with a few seconds to say why
      kill_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    }
  }
  g_child_count = 0;
  if (!failure.empty()) {
    std::fprintf(stderr, "spawn: %s; the other workers were stopped\n", failure.c_str());
    std::fflush(stderr);
  }
  return exit_code;
}

}  // namespace

// Looser than resolve_launch_env on purpose: any one of these variables means a launcher is there,
// even if it set too few of them to say who this process is.
std::string started_by_launcher() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (set("RANK") || set("LOCAL_RANK") || set("WORLD_SIZE")) return "torchrun (RANK, LOCAL_RANK or WORLD_SIZE is set)";
  if (set("OMPI_COMM_WORLD_RANK")) return "mpirun (OMPI_COMM_WORLD_RANK is set)";
  // One srun task may start workers (one such program per node); several tasks would each do it.
  const char* step = std::getenv("SLURM_STEP_ID");
  if (step == nullptr) step = std::getenv("SLURM_STEPID");
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (tasks == nullptr) tasks = std::getenv("SLURM_NTASKS");
  if (step != nullptr && tasks != nullptr && std::atoi(tasks) > 1)
    return std::string("srun with ") + tasks + " tasks (SLURM_STEP_ID is set)";
  return "";
}

bool is_spawned_worker() { return std::getenv(kRankVar) != nullptr; }

int spawn_master_port() {
  if (is_spawned_worker()) {
    const char* port = std::getenv(kPortVar);
    DDP_CHECK(port != nullptr && std::atoi(port) > 0, "this worker was not told its rendezvous port",
              "start the program itself (it starts its workers), not one of its workers");
    return std::atoi(port);
  }
  if (g_listen_fd < 0) bind_free_port();
  return g_listen_port;
}

int take_spawn_listen_socket(int port) {
  if (is_spawned_worker()) {
    const char* fd = std::getenv(kListenFdVar);
    const char* own = std::getenv(kPortVar);
    if (fd == nullptr || own == nullptr || std::atoi(own) != port) return -1;
    ::unsetenv(kListenFdVar);  // taken once
    const int n = std::atoi(fd);
    return ::fcntl(n, F_SETFD, FD_CLOEXEC) == 0 ? n : -1;  // a valid descriptor, not passed on again
  }
  if (g_listen_fd < 0 || g_listen_port != port) return -1;
  const int fd = g_listen_fd;
  g_listen_fd = -1;
  return fd;
}

int spawn(int nprocs, const std::function<int(int rank)>& worker) {
  if (const char* rank = std::getenv(kRankVar)) {
    // End with the parent: a worker must never outlive the job that started it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char* parent = std::getenv(kParentVar);
    if (parent && std::to_string(::getppid()) != parent) return kExitError;  // parent already gone
    return worker(std::atoi(rank));
  }
  const std::string launcher = started_by_launcher();
  if (!launcher.empty()) {
    const auto args = own_arguments();
    const std::string program = args.empty() ? "this program" : args[0].substr(args[0].find_last_of('/') + 1);
    std::fprintf(stderr,
                 "error: %s starts its own workers, but was started by %s, so every rank would start a set of "
                 "its own (fix: run it without the launcher, or let each process read its rank from the launcher's "
                 "environment instead of calling spawn)\n",
                 program.c_str(), launcher.c_str());
    std::fflush(stderr);
    return kExitError;
  }
  return run_parent(nprocs);
}

}  // namespace ddp
