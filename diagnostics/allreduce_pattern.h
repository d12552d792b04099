// defines: AllreducePattern — what allreduce_check puts in each rank's buffer and what the sum
//          must be, in closed form, so every rank can check an all-reduce exactly.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ddp/error.h"

namespace diagnostics {

// Rank r holds  i % period + r  at index i, so the sum over n ranks is  n * (i % period) + n(n-1)/2.
// Every value and partial sum is a whole number below 2^24, which float32 adds exactly in any
// order: a correct all-reduce matches to the bit, and a lost, doubled or shifted piece of any
// rank's buffer does not.
class AllreducePattern {
 public:
  explicit AllreducePattern(int world) : world_(world) {
    const int64_t exact = int64_t{1} << 24, offset = int64_t{world} * (world - 1) / 2;
    period_ = world >= 1 && offset < exact ? std::min<int64_t>(4093, (exact - offset) / world) : 0;
    DDP_CHECK(world >= 1 && period_ >= 1,
              "the all-reduce check is exact in float32 for up to 5792 ranks, not " + std::to_string(world),
              "run it on fewer ranks");
  }

  // This rank's buffer before the all-reduce.
  torch::Tensor mine(int64_t count, int rank, const torch::Device& device) const {
    return index_pattern(count, device).add_(rank);
  }
  // Every rank's buffer after a correct all-reduce (sum).
  torch::Tensor sum(int64_t count, const torch::Device& device) const {
    return index_pattern(count, device).mul_(world_).add_(int64_t{world_} * (world_ - 1) / 2);
  }
  // How many elements of an all-reduced buffer differ from the sum.
  int64_t wrong(const torch::Tensor& reduced) const {
    return reduced.ne(sum(reduced.numel(), reduced.device())).sum().item<int64_t>();
  }

 private:
  torch::Tensor index_pattern(int64_t count, const torch::Device& device) const {
    auto i = torch::arange(count, torch::TensorOptions().dtype(torch::kInt32).device(device));
    return i.remainder_(period_).to(torch::kFloat32);
  }
  int world_;
  int64_t period_ = 0;
};

}  // namespace diagnostics
