// The process group when a peer dies: an error this rank can report, never a silent death by
// signal. (The fault tests kill real ranks under real launchers; this is the library's part.)
// Rank 0 keeps the store it serves until the others have left. The host wait of NCCL's synchronous
// calls (polling, failures, timeout, a stop request) and the one message shape of collective
// failures, tested with works a CPU can make.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value
#include "ddp/stop_signal.h"
#include "free_port.h"
#include "multiprocess.h"

namespace {

// One process needs no port anyone else knows: it serves on any free one. (A fixed default made two
// single-process runs on one node meet: "master port 29500 ... is already in use".)
TEST(ProcessGroup, OneProcessGroupsOnOneHostDoNotMeet) {
  ddp::LaunchEnv one;  // rank 0 of 1, no port chosen
  ASSERT_EQ(one.master_port, 0);
  ddp::ProcessGroupOptions options;
  options.rendezvous_timeout = options.collective_timeout = std::chrono::seconds(30);
  auto first = ddp::init_process_group(one, torch::Device(torch::kCPU), options);
  auto second = ddp::init_process_group(one, torch::Device(torch::kCPU), options);
  auto t = torch::ones({4});
  second->allreduce_sum(t);
  first->allreduce_sum(t);
  EXPECT_EQ(t.sum().item<double>(), 4.0);
}

// A tensor that is not on the group's device is refused before the backend sees it, naming the call
// (NCCL's own words name none): on a CPU group a meta tensor stands for a CPU tensor on a GPU group.
TEST(ProcessGroup, RefusesATensorOffItsDevice) {
  ddp::LaunchEnv one;
  auto pg = ddp::init_process_group(one, torch::Device(torch::kCPU));
  auto off = torch::zeros({1}, torch::TensorOptions().device(torch::kMeta));
  for (int call = 0; call < 2; ++call) {
    try {
      if (call == 0) {
        pg->allreduce_sum(off, "the vote of a test");
      } else {
        std::vector<torch::Tensor> list{off};
        pg->broadcast(list, 0, "the broadcast of a test");
      }
      ADD_FAILURE() << "no error for a tensor on the meta device";
    } catch (const ddp::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(call == 0 ? "the vote of a test: a tensor on meta" : "the broadcast of a test"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("pg.device()"), std::string::npos) << what;
    }
  }
  auto fine = torch::ones({1});
  pg->allreduce_sum(fine, "after the refusals");
  EXPECT_EQ(fine.item<float>(), 1.0f);
}

// Several ranks without a port: refused before anyone waits, naming the fix.
TEST(ProcessGroup, SeveralRanksWithoutAPortAreRefused) {
  ddp::LaunchEnv two;
  two.world_size = two.local_world_size = 2;
  try {
    ddp::init_process_group(two, torch::Device(torch::kCPU));
    FAIL() << "no error";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no master port for the 2 ranks"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("MASTER_PORT"), std::string::npos) << e.hint();
  }
}

// A library constructor does not change the process: SIGPIPE is configure_process's (process.h),
// which the programs' run_main calls, not the process group's.
TEST(ProcessGroup, MakingAGroupLeavesSigpipeAlone) {
  struct sigaction before {};
  ::sigaction(SIGPIPE, nullptr, &before);
  ::signal(SIGPIPE, SIG_DFL);
  ddp::LaunchEnv one;
  ddp::ProcessGroupOptions options;
  options.rendezvous_timeout = options.collective_timeout = std::chrono::seconds(30);
  auto pg = ddp::init_process_group(one, torch::Device(torch::kCPU), options);
  struct sigaction after {};
  ::sigaction(SIGPIPE, nullptr, &after);
  ::sigaction(SIGPIPE, &before, nullptr);
  EXPECT_EQ(after.sa_handler, SIG_DFL);
}

// Under run_main (multiprocess.h), whose configure_process ignores SIGPIPE, as Python does.
TEST(ProcessGroup, APeerThatDiesIsAnErrorNotSigpipe) {
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [](int rank, auto pg) {
                  // Gloo writes to the dead peer's socket: with SIGPIPE at its default, that write
                  // ends this process (exit -13) before any error can be reported.
                  struct sigaction current {};
                  ::sigaction(SIGPIPE, nullptr, &current);
                  if (current.sa_handler != SIG_IGN) {
                    std::fprintf(stderr, "rank %d: SIGPIPE is not ignored under run_main\n", rank);
                    return 1;
                  }
                  auto t = torch::ones({1 << 16});
                  pg->allreduce_sum(t, "allreduce while both ranks live");
                  if (rank == 1) ::_exit(0);  // dies without a word: its sockets close
                  for (int i = 0; i < 100; ++i) {
                    try {
                      pg->allreduce_sum(t, "allreduce after the peer died");
                    } catch (const ddp::Error& e) {
                      std::printf("rank 0 after %d allreduce(s): %s\n", i + 1, e.what());
                      return 0;
                    }
                  }
                  std::fprintf(stderr, "rank 0: 100 allreduces with a dead peer and no error\n");
                  return 1;
                },
                std::chrono::seconds(20)),
            0);
}

}  // namespace

// Rank 0's TCPStore serves the others: rank 0 must not take it away (by leaving) while a peer
// still reads it. Without the departure wait, rank 1's read meets a closed server.
TEST(ProcessGroup, RankZeroServesTheStoreUntilEveryPeerHasLeft) {
  if (!ddp::is_spawned_worker()) ::setenv("DDPW_TEST_PORT", std::to_string(ddp_test::free_port()).c_str(), 1);
  EXPECT_EQ(ddp_test::run_processes(2,
                                    [](int rank, const ddp::LaunchEnv& through_file) {
                                      ddp::LaunchEnv launch = through_file;
                                      launch.init_method.clear();  // a TCPStore, served by rank 0
                                      launch.launcher = "options";
                                      launch.master_addr = "127.0.0.1";
                                      launch.master_port = std::atoi(::getenv("DDPW_TEST_PORT"));
                                      ddp::ProcessGroupOptions options;
                                      options.join_backend = false;  // the store alone
                                      options.rendezvous_timeout = options.collective_timeout =
                                          std::chrono::seconds(20);
                                      auto pg = ddp::init_process_group(launch, torch::Device(torch::kCPU), options);
                                      pg->all_gather_strings("here");
                                      if (rank == 0) return 0;  // leaves at once
                                      std::this_thread::sleep_for(std::chrono::milliseconds(500));
                                      try {
                                        const auto bytes = pg->store().get("ddpw/gather/0/0");
                                        return std::string(bytes.begin(), bytes.end()) == "here" ? 0 : 1;
                                      } catch (const std::exception& e) {
                                        std::fprintf(stderr, "rank 1: the store is gone: %s\n", e.what());
                                        return 1;
                                      }
                                    }),
            0);
}

// ---- the host wait (NCCL's synchronous calls use it; here with works a CPU can make) ----------

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A work that completes at a given time (or never).
class FakeWork : public c10d::Work {
 public:
  explicit FakeWork(milliseconds after) : done_at_(Clock::now() + after) {}
  static c10::intrusive_ptr<FakeWork> never() { return c10::make_intrusive<FakeWork>(milliseconds(1000000000)); }
  bool isCompleted() override { return Clock::now() >= done_at_; }

 private:
  Clock::time_point done_at_;
};

ddp::HostWaitPolicy policy(milliseconds timeout, milliseconds stop_grace = std::chrono::seconds(20)) {
  ddp::HostWaitPolicy p;
  p.timeout = timeout;
  p.stop_grace = stop_grace;
  return p;
}

}  // namespace

TEST(HostWait, ReturnsWhenTheWorkCompletes) {
  auto work = c10::make_intrusive<FakeWork>(milliseconds(50));
  const auto r = ddp::wait_for_work(*work, policy(std::chrono::seconds(10)));
  EXPECT_EQ(r.end, ddp::HostWaitEnd::kCompleted);
  EXPECT_GE(r.waited_s, 0.05);
  EXPECT_LT(r.waited_s, 1.0);  // polls sleep at most 1 ms
}

TEST(HostWait, GivesUpAtTheTimeout) {
  const auto r = ddp::wait_for_work(*FakeWork::never(), policy(milliseconds(200)));
  EXPECT_EQ(r.end, ddp::HostWaitEnd::kTimedOut);
  EXPECT_GE(r.waited_s, 0.2);
  EXPECT_LT(r.waited_s, 2.0);
  EXPECT_NE(r.why.find("collective timeout"), std::string::npos) << r.why;
}

// The backend's verdict or a peer's published failure ends the wait at once, with its words.
TEST(HostWait, AReportedFailureEndsTheWaitAtOnce) {
  auto p = policy(std::chrono::seconds(30));
  int asked = 0;
  p.failure = [&] { return ++asked < 3 ? std::string() : std::string("rank 1: allreduce failed: boom"); };
  p.failure_period = milliseconds(10);
  const auto r = ddp::wait_for_work(*FakeWork::never(), p);
  EXPECT_EQ(r.end, ddp::HostWaitEnd::kFailed);
  EXPECT_EQ(r.why, "rank 1: allreduce failed: boom");
  EXPECT_EQ(asked, 3);
  EXPECT_LT(r.waited_s, 1.0);
}

// A stop request while a collective is stuck: the wait gives it the grace, then gives up, long
// before the collective timeout (a preemption does not wait for it).
TEST(HostWait, AStopRequestGivesAStuckCollectiveOnlyTheGrace) {
  auto p = policy(std::chrono::seconds(60), milliseconds(300));
  const auto asked_at = Clock::now() + milliseconds(100);
  p.stop_requested = [&] { return Clock::now() >= asked_at; };
  const auto r = ddp::wait_for_work(*FakeWork::never(), p);
  EXPECT_EQ(r.end, ddp::HostWaitEnd::kStopGraceOver);
  EXPECT_GE(r.waited_s, 0.4);
  EXPECT_LT(r.waited_s, 3.0);
  EXPECT_NE(r.why.find("no snapshot can be written now"), std::string::npos) << r.why;
}

// ...but a collective that completes within the grace completes: the caller then stops and
// snapshots at the agreed step.
TEST(HostWait, AStopRequestLetsACollectiveFinishWithinTheGrace) {
  auto p = policy(std::chrono::seconds(60), std::chrono::seconds(5));
  p.stop_requested = [] { return true; };
  auto work = c10::make_intrusive<FakeWork>(milliseconds(200));
  EXPECT_EQ(ddp::wait_for_work(*work, p).end, ddp::HostWaitEnd::kCompleted);
}

TEST(CollectiveError, OneMessageShapeForEveryBackend) {
  const ddp::Error e = ddp::collective_error("stop agreement", 1, 4, 2.04, 600, "NCCL error: remote process exited");
  EXPECT_EQ(e.message(),
            "stop agreement failed on rank 1 of 4 after waiting 2.0 s (timeout 600.0 s): "
            "NCCL error: remote process exited");
  EXPECT_NE(e.hint().find(ddp::setting_name(ddp::Setting::kCollectiveTimeout)), std::string::npos) << e.hint();
  EXPECT_EQ(ddp::collective_error("x", 0, 2, 0, 1, "y", "my hint").hint(), "my hint");
}

// The library speaks of its own settings; a program on top (the course: its flags) registers how
// its users set them, and the same error then names that.
TEST(CollectiveError, NamesTheLibrarysSettingUnlessTheProgramRegisteredItsOwn) {
  using ddp::Setting;
  const std::string before = ddp::setting_name(Setting::kCollectiveTimeout);  // run_main may have named it
  ddp::set_setting_name(Setting::kCollectiveTimeout, "");
  const std::string library = ddp::setting_name(Setting::kCollectiveTimeout);
  const std::string unnamed = ddp::collective_error("allreduce", 0, 2, 1, 1, "timed out").hint();
  ddp::set_setting_name(Setting::kCollectiveTimeout, "--collective-timeout");
  const std::string named = ddp::collective_error("allreduce", 0, 2, 1, 1, "timed out").hint();
  ddp::set_setting_name(Setting::kCollectiveTimeout, before == library ? "" : before);

  EXPECT_EQ(library, "ProcessGroupOptions::collective_timeout");
  EXPECT_NE(unnamed.find("; ProcessGroupOptions::collective_timeout sets the wait"), std::string::npos) << unnamed;
  EXPECT_EQ(unnamed.find("--"), std::string::npos) << unnamed;
  EXPECT_NE(named.find("; --collective-timeout sets the wait"), std::string::npos) << named;
  EXPECT_EQ(named.find("ProcessGroupOptions"), std::string::npos) << named;
}

// A setting with a value: code for the library's names, "NAME VALUE" for a registered one.
TEST(SettingNames, AValueFollowsTheRegisteredNameOrReadsAsCode) {
  using ddp::Setting;
  const std::string before = ddp::setting_name(Setting::kBackend);
  ddp::set_setting_name(Setting::kBackend, "");
  const std::string library = ddp::setting_value(Setting::kBackend, "gloo");
  const std::string library_name = ddp::setting_name(Setting::kBackend);
  ddp::set_setting_name(Setting::kBackend, "--backend");
  const std::string registered = ddp::setting_value(Setting::kBackend, "gloo");
  const std::string alone = ddp::setting_value(Setting::kBackend, "");
  ddp::set_setting_name(Setting::kBackend, before == library_name ? "" : before);

  EXPECT_EQ(library, "ProcessGroupOptions::backend = \"gloo\"");
  EXPECT_EQ(registered, "--backend gloo");
  EXPECT_EQ(alone, "--backend");
}

TEST(ProcessGroupBackend, AutoIsNcclOnCudaAndGlooOnTheCpu) {
  EXPECT_EQ(ddp::resolve_backend("auto", torch::Device(torch::kCPU)), "gloo");
  EXPECT_EQ(ddp::resolve_backend("auto", torch::Device(torch::kCUDA, 0)), "nccl");
  EXPECT_EQ(ddp::resolve_backend("gloo", torch::Device(torch::kCUDA, 0)), "gloo");  // two ranks may share a GPU
}

// The host wait on a real collective: rank 1 joins late; rank 0's wait sees it complete with the
// right sum.
TEST(HostWait, WaitsForAGlooCollectiveThatCompletesLate) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int rank, auto pg) {
                                  if (rank == 1) std::this_thread::sleep_for(milliseconds(300));
                                  auto t = torch::full({4}, rank + 1.0);
                                  std::vector<torch::Tensor> tensors{t};
                                  const auto start = Clock::now();
                                  pg->wait_on_host(pg->allreduce_sum_async(tensors), "late allreduce");
                                  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
                                  std::printf("rank %d waited %.3f s\n", rank, waited);
                                  return torch::equal(t, torch::full({4}, 3.0)) && (rank == 1 || waited > 0.2) ? 0 : 1;
                                }),
            0);
}

// SIGTERM while a collective is stuck (rank 1 is late by far more than the grace): rank 0 stops
// waiting after the grace, with the collective's message shape and a hint about the snapshot.
TEST(HostWait, SigtermDuringAStuckGlooCollectiveEndsTheWaitAfterTheGrace) {
  ddp_test::RankSetup setup;
  setup.stop_grace = milliseconds(500);
  setup.timeout = std::chrono::seconds(30);
  EXPECT_EQ(ddp_test::run_ranks(setup,
                                [](int rank, auto pg) {
                                  auto t = torch::ones({4});
                                  std::vector<torch::Tensor> tensors{t};
                                  if (rank == 1) {  // late, then finds its peer gone: an error is fine
                                    std::this_thread::sleep_for(std::chrono::seconds(4));
                                    try {
                                      pg->wait(pg->allreduce_sum_async(tensors), "late allreduce");
                                    } catch (const ddp::Error&) {
                                    }
                                    return 0;
                                  }
                                  ddp::install_stop_signal_handlers();
                                  auto work = pg->allreduce_sum_async(tensors);
                                  std::thread([] {
                                    std::this_thread::sleep_for(milliseconds(200));
                                    ::kill(::getpid(), SIGTERM);
                                  }).detach();
                                  const auto start = Clock::now();
                                  try {
                                    pg->wait_on_host(work, "stuck allreduce");
                                  } catch (const ddp::Error& e) {
                                    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
                                    std::printf("rank 0 after %.2f s: %s (fix: %s)\n", waited, e.message().c_str(),
                                                e.hint().c_str());
                                    const std::string what = e.what();
                                    const std::string start_of = "stuck allreduce failed on rank 0 of 2 after waiting";
                                    const bool shape = what.rfind(start_of, 0) == 0 &&
                                                       what.find("a stop was requested") != std::string::npos &&
                                                       e.hint().find("last snapshot stands") != std::string::npos;
                                    return shape && waited > 0.6 && waited < 3.5 ? 0 : 1;
                                  }
                                  std::fprintf(stderr, "rank 0: the wait ended without an error\n");
                                  return 1;
                                }),
            0);
}
