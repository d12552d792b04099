// StopAgreement: one rank gets a stop signal, every rank stops at the same step, at the first check
// after the request, and the ranks agree far less often than once per step.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "ddp/process_group.h"
#include "ddp/stop_agreement.h"
#include "ddp/stop_signal.h"
#include "multiprocess.h"

namespace {

// Every rank's stop step, in rank order, through the store.
std::vector<std::string> gather(ddp::ProcessGroup& pg, int64_t value) {
  return pg.all_gather_strings(std::to_string(value));
}

TEST(StopAgreement, OneRankSignalledAllStopAtTheSameStep) {
  constexpr int kRanks = 3;
  constexpr int64_t kRequestAt = 1500, kMaxSteps = 100000;
  const int rc = ddp_test::run_ranks(kRanks, [&](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
    ddp::install_stop_signal_handlers();
    ddp::StopAgreement stop(pg.get(), /*check_seconds=*/0.05);
    int64_t stopped_at = -1, interval_at_request = 0;
    for (int64_t step = 0; step < kMaxSteps; ++step) {
      if (rank == 1 && step == kRequestAt) ::raise(SIGUSR1);  // a real signal, to one rank only
      if (step == kRequestAt) interval_at_request = stop.interval();
      if (stop.should_stop()) {
        stopped_at = step;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // a "training step"
    }
    const auto all = gather(*pg, stopped_at);
    int failures = 0;
    for (int r = 0; r < kRanks; ++r)
      if (all[static_cast<size_t>(r)] != all[0]) {
        std::fprintf(stderr, "rank %d stopped at step %s, rank 0 at %s\n", r, all[static_cast<size_t>(r)].c_str(),
                     all[0].c_str());
        ++failures;
      }
    // At the first check after the request: within the interval in force when it came.
    if (stopped_at < kRequestAt || stopped_at > kRequestAt + interval_at_request) {
      std::fprintf(stderr, "rank %d: request at step %lld, stop at %lld, interval %lld\n", rank,
                   static_cast<long long>(kRequestAt), static_cast<long long>(stopped_at),
                   static_cast<long long>(interval_at_request));
      ++failures;
    }
    // Not a check per step: far fewer allreduces than steps.
    if (stop.checks() * 10 > stopped_at) {
      std::fprintf(stderr, "rank %d: %lld checks in %lld steps\n", rank, static_cast<long long>(stop.checks()),
                   static_cast<long long>(stopped_at));
      ++failures;
    }
    if (rank == 0)
      std::printf("stopped at step %lld (request at %lld) after %lld checks, interval %lld\n",
                  static_cast<long long>(stopped_at), static_cast<long long>(kRequestAt),
                  static_cast<long long>(stop.checks()), static_cast<long long>(stop.interval()));
    return failures == 0 ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}

TEST(StopAgreement, NoSignalNoStop) {
  const int rc = ddp_test::run_ranks(2, [&](int /*rank*/, std::shared_ptr<ddp::ProcessGroup> pg) {
    ddp::install_stop_signal_handlers();
    ddp::StopAgreement stop(pg.get(), 0.01);
    for (int64_t step = 0; step < 3000; ++step)
      if (stop.should_stop()) return 1;
    return stop.checks() >= 1 ? 0 : 1;  // it did check, and nobody had asked
  });
  EXPECT_EQ(rc, 0);
}

TEST(StopAgreement, AloneStopsAtTheNextStep) {
  // A death test runs in a child process: the signal flag is process-wide.
  EXPECT_EXIT(
      {
        ddp::install_stop_signal_handlers();
        ddp::StopAgreement stop(nullptr);
        bool early = false;
        for (int step = 0; step < 10; ++step) early = early || stop.should_stop();
        ::raise(SIGTERM);
        _exit(!early && stop.should_stop() && stop.checks() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
