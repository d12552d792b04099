// defines: run_ranks — runs a test body as N real processes (this test binary re-executed once per
//          rank by ddp::spawn, with the same --gtest_filter), meeting through a fresh FileStore,
//          on a device and backend of the test's choice (CPU and Gloo by default; two ranks may
//          share one GPU over Gloo); run_processes, the same without the group, for a test that
//          joins (or fails to join) it itself.
// A worker runs only the test that spawned it (test_main.cpp), then exits. A test with several
// runs (e.g. save with 2 ranks, resume with 3) names each one's phase; a worker re-runs the test
// from the top and skips every run but its own phase's. Such phases share files through
// shared_test_dir().
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "course/run_main.h"
#include "ddp/device.h"
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/launch_env.h"
#include "ddp/process_group.h"
#include "ddp/spawn.h"

namespace ddp_test {

inline std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : "";
}

// The ranks of a test: how many, on which device (as --device: "cpu", "cuda", "cuda:0"; every
// rank chooses it as choose_device would) and backend, with which timeouts.
struct RankSetup {
  int n = 2;
  std::string device = "cpu";
  std::string backend = "auto";
  std::chrono::milliseconds timeout = std::chrono::seconds(60);  // rendezvous and collectives
  std::chrono::milliseconds stop_grace = std::chrono::seconds(20);
  std::string phase;                         // several runs in one test: each its own name
  bool collectives_at_world_size_1 = false;  // ProcessGroupOptions': one rank issues the collectives too
};

// Rank `rank` of `n`, all on this node, meeting through the test's FileStore.
inline ddp::LaunchEnv test_launch(int rank, int n) {
  ddp::LaunchEnv launch;
  launch.global_rank = launch.local_rank = rank;
  launch.world_size = launch.local_world_size = n;
  launch.init_method = std::string("file://") + ::getenv("DDPW_TEST_STORE");
  return launch;
}

// In the test process: spawns n ranks and returns their combined exit code. In a rank: runs
// body(rank, launch) and exits with its code (0 = the rank's checks passed).
inline int run_processes(int n, const std::function<int(int rank, const ddp::LaunchEnv& launch)>& body,
                         const std::string& phase = "") {
  if (!ddp::is_spawned_worker()) {
    char dir[] = "/tmp/ddpw-test-XXXXXX";
    if (!::mkdtemp(dir)) return 1;
    ::setenv("DDPW_TEST_STORE", (std::string(dir) + "/store").c_str(), 1);
    ::setenv("DDPW_TEST_NAME", current_test_name().c_str(), 1);
    ::setenv("DDPW_TEST_PHASE", phase.c_str(), 1);
    const int rc = ddp::spawn(n, nullptr);
    ddp::remove_tree(dir);  // every rank, and so every process group, has ended
    return rc;
  }
  const char* my_phase = ::getenv("DDPW_TEST_PHASE");
  if (phase != (my_phase ? my_phase : "")) return 0;  // another phase's workers: not ours
  // A worker runs only its parent's test (test_main.cpp narrows its filter), then ends.
  const int rc = ddp::spawn(n, [&](int rank) {
    return ddpw::run_main([&] { return body(rank, test_launch(rank, n)); }, "[rank " + std::to_string(rank) + "]");
  });
  std::fflush(nullptr);
  ::_exit(rc);
}

inline ddp::ProcessGroupOptions group_options(const RankSetup& setup) {
  ddp::ProcessGroupOptions options;
  options.backend = setup.backend;
  options.rendezvous_timeout = options.collective_timeout = setup.timeout;
  options.stop_grace = setup.stop_grace;
  options.collectives_at_world_size_1 = setup.collectives_at_world_size_1;
  return options;
}

// As run_processes, with the group joined: body(rank, group).
inline int run_ranks(const RankSetup& setup,
                     const std::function<int(int rank, std::shared_ptr<ddp::ProcessGroup> pg)>& body) {
  return run_processes(
      setup.n,
      [&](int rank, const ddp::LaunchEnv& launch) {
        const torch::Device device = ddp::choose_device(setup.device, rank);
        auto pg = ddp::init_process_group(launch, device, group_options(setup));
        return body(rank, pg);
      },
      setup.phase);
}

// n CPU ranks over Gloo.
inline int run_ranks(int n, const std::function<int(int rank, std::shared_ptr<ddp::ProcessGroup> pg)>& body,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60), const std::string& phase = "") {
  RankSetup setup;
  setup.n = n;
  setup.timeout = timeout;
  setup.phase = phase;
  return run_ranks(setup, body);
}

// A folder every phase of the current test sees: the test process creates it (call it once per
// test, before the first run) and its workers inherit the path. The test removes it.
inline std::string shared_test_dir() {
  if (ddp::is_spawned_worker()) {
    const char* dir = ::getenv("DDPW_TEST_SHARED_DIR");
    return dir ? dir : "";
  }
  char dir[] = "/tmp/ddpw-test-shared-XXXXXX";
  if (!::mkdtemp(dir)) return "";
  ::setenv("DDPW_TEST_SHARED_DIR", dir, 1);
  return dir;
}

}  // namespace ddp_test
