// The process group when a peer dies: an error this rank can report, never a silent death by
// signal. (The fault tests kill real ranks under real launchers; this is the library's part.)
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>

#include "ddp/error.h"
#include "multiprocess.h"

namespace {

TEST(ProcessGroup, APeerThatDiesIsAnErrorNotSigpipe) {
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [](int rank, auto pg) {
                  // Gloo writes to the dead peer's socket: with SIGPIPE at its default, that write
                  // ends this process (exit -13) before any error can be reported.
                  struct sigaction current {};
                  ::sigaction(SIGPIPE, nullptr, &current);
                  if (current.sa_handler != SIG_IGN) {
                    std::fprintf(stderr, "rank %d: SIGPIPE is not ignored once the group exists\n", rank);
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
