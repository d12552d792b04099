// defines: the two collectives of ZeRO, on whatever backend the process group has:
//   ReduceScatter — rank r receives the sum over all ranks of slice r of a flat buffer (N equal
//     slices). NCCL: its own reduce-scatter (_reduce_scatter_base). Gloo (torch 2.11) has none of
//     its own: its _reduce_scatter_base clones the whole buffer and allreduces it, so every byte
//     travels as in an allreduce (2(N-1)/N of the buffer per rank) plus a copy. Here Gloo uses
//     alltoall instead: rank r sends slice j to rank j, (N-1)/N of the buffer per rank as in a ring
//     reduce-scatter, and sums the N slices it receives.
//   all_gather_slices — every rank's slice r of a flat buffer to every rank, in place
//     (_allgather_base: NCCL's and Gloo's allgather).
#pragma once

#include <torch/torch.h>

#include <string>

#include "ddp/process_group.h"

namespace ddp {

// One reduce-scatter in flight. `input` holds N * S elements; the result (S elements) goes into
// `output`, or is added to it with accumulate. `input` must stay untouched until finish().
class ReduceScatter {
 public:
  ReduceScatter() = default;
  ReduceScatter(ProcessGroup& pg, const torch::Tensor& input, const torch::Tensor& output, bool accumulate);
  bool active() const { return pg_ != nullptr; }
  const c10::intrusive_ptr<c10d::Work>& work() const { return work_; }  // none at world size 1
  // Waits (with the collective timeout; the error names `what`) and writes the result.
  void finish(const std::string& what);

 private:
  ProcessGroup* pg_ = nullptr;
  torch::Tensor input_, output_, received_;
  bool accumulate_ = false;
  c10::intrusive_ptr<c10d::Work> work_;
};

// flat (N * S elements): on return every rank's slice r holds what rank r had there.
void all_gather_slices(ProcessGroup& pg, std::vector<torch::Tensor>& flats, const std::string& what);

}  // namespace ddp
