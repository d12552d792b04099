// CollectiveTrace (collective_trace.h): a collective that fails names where the other ranks are.
//   * the sentence itself: a rank that never arrived (and what it last entered), one in another
//     collective, one past this rank, one without a record, all arrived, the limit;
//   * 2 CPU ranks over Gloo, a collective inside a rank guard: rank 0's extra allreduce is matched
//     by rank 1's next one (Gloo cannot tell them apart), then rank 0 waits alone and times out
//     (3 s): its error names rank 1, the collective it never arrived at and the one it entered
//     last, read from the store.
// The fault matrix (tests/faults/rank_killed.sh) checks the same on a real program whose rank is
// stopped or killed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ddp/collective_trace.h"
#include "ddp/error.h"
#include "ddp/host.h"
#include "ddp/process_group.h"
#include "multiprocess.h"

namespace collective_trace_tests {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ddp::TraceRecord record(int64_t seq, const std::string& what, double at = 100) { return {seq, "node7", what, at}; }

TEST(CollectiveTrace, RecordsRoundTripThroughTheirText) {
  const ddp::TraceRecord r{42, "node7", "DDP's gradient allreduce\t(bucket 2)", 1234.5};
  const auto back = ddp::TraceRecord::decode(r.encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->seq, 42);
  EXPECT_EQ(back->host, "node7");
  EXPECT_EQ(back->what, r.what);
  EXPECT_DOUBLE_EQ(back->at, 1234.5);
  EXPECT_FALSE(ddp::TraceRecord::decode("garbage").has_value());
  EXPECT_FALSE(ddp::TraceRecord::decode("x\ty\tz\tw").has_value());
}

TEST(CollectiveTrace, NamesEachRankNotInThisCollective) {
  const auto mine = record(38, "stop agreement", 110);
  std::vector<std::optional<ddp::TraceRecord>> all{mine,
                                                   record(37, "DDP's gradient allreduce", 104.8),
                                                   record(38, "broadcast of the checkpoint"),
                                                   record(40, "stop agreement"),
                                                   std::nullopt,
                                                   record(38, "stop agreement")};
  const std::string text = ddp::describe_other_ranks(0, mine, all, 110);
  EXPECT_TRUE(contains(text, "this rank (0) is in #38 'stop agreement'")) << text;
  EXPECT_TRUE(contains(text,
                       "rank 1 @ node7 never arrived at #38 'stop agreement': its last was #37 'DDP's gradient "
                       "allreduce', 5.2 s before this report"))
      << text;
  EXPECT_TRUE(contains(text,
                       "rank 2 @ node7 is at #38 but in 'broadcast of the checkpoint' (the ranks call different "
                       "collectives"))
      << text;
  EXPECT_TRUE(contains(text, "rank 3 @ node7 went on to #40 'stop agreement'")) << text;
  EXPECT_TRUE(contains(text, "rank 4 never entered a collective of this group")) << text;
  EXPECT_FALSE(contains(text, "rank 5")) << text;  // it is where this rank is

  EXPECT_TRUE(contains(ddp::describe_other_ranks(0, mine, all, 110, 2), "; and 2 more ranks"));
}

TEST(CollectiveTrace, AllRanksHereSaysTheCollectiveItselfStalled) {
  const auto mine = record(5, "barrier");
  const std::string text = ddp::describe_other_ranks(1, mine, {mine, mine, mine}, 100);
  EXPECT_TRUE(contains(text, "this rank (1) is in #5 'barrier'; every other rank entered it too")) << text;
}

// Rank 0 calls an allreduce that rank 1 does not (a collective inside `if (rank == 0)`).
TEST(CollectiveTrace, ATimeoutNamesTheRankThatNeverArrived) {
  const int rc = ddp_test::run_ranks(
      2,
      [](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
        auto t = torch::ones({1});
        if (rank == 1) {
          pg->allreduce_sum(t, "the epoch's end");  // matched by rank 0's guarded allreduce
          // Stay in the group (its record in the store) until rank 0 has checked its error.
          pg->store().wait({"test/checked"}, std::chrono::seconds(60));
          return 0;
        }
        pg->allreduce_sum(t, "rank 0's guarded allreduce");
        std::string message;
        const auto start = std::chrono::steady_clock::now();
        try {
          pg->allreduce_sum(t, "the epoch's end");
        } catch (const ddp::Error& e) {
          message = e.what();
        }
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        pg->store().set("test/checked", std::vector<uint8_t>{1});
        std::printf("[rank 0] after %.1f s: %s\n", took, message.c_str());
        const std::string expected = "rank 1 @ " + ddp::host_name() +
                                     " never arrived at #3 'the epoch's end': its last was #2 'the epoch's end'";
        const bool named = contains(message, "failed on rank 0 of 2") &&
                           contains(message, "this rank (0) is in #3 'the epoch's end'") && contains(message, expected);
        return named && took < 10 ? 0 : 1;
      },
      std::chrono::seconds(3));
  EXPECT_EQ(rc, 0);
}

}  // namespace collective_trace_tests
