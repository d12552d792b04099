// defines: what the GPU test files (test_gpu.cpp, test_gpu_zero.cpp) share — REQUIRE_GPUS (skip,
//          with the reason, below N visible GPUs), cuBLAS's deterministic workspace, a temporary
//          folder, a one-rank NCCL group, shell commands with a time limit (the course's programs
//          run as a learner runs them), random IDX files and the final checksum of a program's log.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddp/detail/collective_check.h"  // defines: CheckedBackend (collectives_issued)
#include "ddp/device.h"
#include "ddp/files.h"
#include "ddp/launch_env.h"
#include "ddp/process_group.h"
#include "free_port.h"

#define REQUIRE_GPUS(n)                                                                              \
  do {                                                                                               \
    const int visible = ddp::visible_gpus();                                                         \
    if (visible < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA GPU(s); " << visible << " visible"; \
  } while (0)

namespace gpu_test {

// cuBLAS reads it when it creates its handle, before the first GEMM of this process: deterministic
// GEMM workspaces for the bitwise comparisons (what --deterministic sets in the step programs).
[[maybe_unused]] inline const int kCublasDeterministic = ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh folder, removed after everything that used it (declare it before the process group).
struct TempDir {
  TempDir() {
    char pattern[] = "/tmp/ddpw-gpu-XXXXXX";
    path = ::mkdtemp(pattern) ? pattern : "";
  }
  ~TempDir() {
    if (!path.empty()) ddp::remove_tree(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

// One NCCL rank on `device`. The wrappers issue their per-step collectives at world size 1 too
// (ProcessGroupOptions::collectives_at_world_size_1), so that NCCL (a one-rank communicator: real
// kernels on its stream, its stash and frees) runs inside the step under test.
inline std::shared_ptr<ddp::ProcessGroup> nccl_group_of_one(const TempDir& dir, const torch::Device& device) {
  ddp::LaunchEnv launch;
  launch.init_method = "file://" + dir.path + "/store";
  ddp::ProcessGroupOptions options;
  options.backend = "nccl";
  options.rendezvous_timeout = options.collective_timeout = std::chrono::seconds(60);
  options.collectives_at_world_size_1 = true;
  return ddp::init_process_group(launch, device, options);
}

// How many collectives `pg` has issued so far (its numbered backend's count).
inline int64_t collectives_issued(ddp::ProcessGroup& pg) {
  return dynamic_cast<const ddp::CheckedBackend&>(pg.backend()).issued();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `command` with /bin/sh in the background; returns its pid.
inline pid_t start_shell(const std::string& command) {
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  if (::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) return -1;
  return pid;
}

// The exit code of `pid`, or -1 after killing it when it runs longer than `limit` (a hang).
inline int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline int run_shell(const std::string& command, std::chrono::seconds limit) {
  return wait_exit(start_shell(command), limit);
}

using ddp_test::free_port;  // tests/free_port.h

inline const std::string kBin = DDPW_BIN_DIR;

inline void put_u32(std::ofstream& out, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) out.put(static_cast<char>(v >> shift));
}

// Random 28x28 images and labels (the CNN with its two dropout layers trains on them).
inline void write_idx_pair(const std::string& dir, const std::string& split, uint32_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::ofstream images(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
  for (uint32_t v : {2051u, count, 28u, 28u}) put_u32(images, v);
  for (uint32_t i = 0; i < count * 28 * 28; ++i) images.put(static_cast<char>(random() % 256));
  std::ofstream labels(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
  for (uint32_t v : {2049u, count}) put_u32(labels, v);
  for (uint32_t i = 0; i < count; ++i) labels.put(static_cast<char>(random() % 10));
}

// Every "final weights checksum" a program's log prints (one per rank), in order; the first of them.
inline std::vector<std::string> checksums_in(const std::string& log) {
  const std::string text = read_file(log);
  static const std::regex line("final weights checksum (\\S+)");
  std::vector<std::string> found;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it)
    found.push_back((*it)[1].str());
  return found;
}
inline std::string checksum_in(const std::string& log) {
  const auto all = checksums_in(log);
  return all.empty() ? "" : all.front();
}

}  // namespace gpu_test
