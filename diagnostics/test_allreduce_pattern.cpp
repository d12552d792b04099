// Tests of allreduce_check's pattern without any process group: the ranks' buffers are summed here,
// in float32 as an all-reduce would, in different orders; wrong sums must be counted.
#include <gtest/gtest.h>

#include "ddp/error.h"                      // defines: ddp::Error
#include "diagnostics/allreduce_pattern.h"  // defines: AllreducePattern

namespace {

using diagnostics::AllreducePattern;

const torch::Device kCpu(torch::kCPU);

// What a correct all-reduce computes, adding the ranks in the given order.
torch::Tensor sum_in_order(const AllreducePattern& pattern, int64_t count, const std::vector<int>& ranks) {
  auto sum = torch::zeros({count}, torch::kFloat32);
  for (int r : ranks) sum += pattern.mine(count, r, kCpu);
  return sum;
}

std::vector<int> ranks_up_to(int world, bool reversed = false) {
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = reversed ? world - 1 - r : r;
  return ranks;
}

TEST(AllreducePattern, CorrectSumsMatchExactlyInAnyOrder) {
  for (int world : {1, 2, 3, 8, 64}) {
    const AllreducePattern pattern(world);
    const int64_t count = 10000;  // more than one period (4093)
    EXPECT_EQ(pattern.wrong(sum_in_order(pattern, count, ranks_up_to(world))), 0) << world << " ranks";
    EXPECT_EQ(pattern.wrong(sum_in_order(pattern, count, ranks_up_to(world, true))), 0) << world << " ranks";
  }
}

TEST(AllreducePattern, StaysExactAtTheLargestWorld) {
  const int world = 5792;  // the sums come closest to 2^24 here
  const AllreducePattern pattern(world);
  EXPECT_EQ(pattern.wrong(sum_in_order(pattern, 600, ranks_up_to(world))), 0);
  EXPECT_EQ(pattern.wrong(sum_in_order(pattern, 600, ranks_up_to(world, true))), 0);
  EXPECT_LT(pattern.sum(600, kCpu).max().item<double>(), double(1 << 24));
}

TEST(AllreducePattern, CountsLostDoubledShiftedAndCorruptedContributions) {
  const int world = 4;
  const int64_t count = 5000;
  const AllreducePattern pattern(world);

  auto lost = sum_in_order(pattern, count, {0, 2, 3});  // rank 1 missing: every element is short
  EXPECT_EQ(pattern.wrong(lost), count);

  auto doubled = sum_in_order(pattern, count, {0, 1, 2, 3, 2});
  EXPECT_EQ(pattern.wrong(doubled), count);

  auto shifted = sum_in_order(pattern, count, {0, 1, 2}) + pattern.mine(count, 3, kCpu).roll(1);
  EXPECT_GT(pattern.wrong(shifted), count / 2);

  auto corrupted = sum_in_order(pattern, count, ranks_up_to(world));
  corrupted[1234] += 1;
  EXPECT_EQ(pattern.wrong(corrupted), 1);
}

TEST(AllreducePattern, RefusesWorldsItCannotCheckExactly) {
  EXPECT_THROW(AllreducePattern(5793), ddp::Error);
  EXPECT_THROW(AllreducePattern(0), ddp::Error);
}

}  // namespace
