// defines: start_bf16_allreduce / finish_bf16_allreduce — PyTorch's bf16_compress_hook
//          (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py) for a DDP gradient bucket:
//          the bucket travels as bfloat16 (half the bytes), is summed in bfloat16 and comes back in
//          the bucket's own dtype. DistributedDataParallel uses them with DdpOptions::bf16_compress.
//          One difference: PyTorch casts, then divides by the world size in bfloat16; here the
//          gradients entered the bucket already divided (in float32), so they are rounded once.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include "ddp/process_group.h"

namespace ddp {

// Casts `bucket` into `wire` (bfloat16, allocated on first use and reused) and starts the sum of
// `wire` over the ranks; none at world size 1, where the cast alone happens (as PyTorch's hook,
// which rounds at any world size). `wire` must stay untouched until finish_bf16_allreduce.
c10::intrusive_ptr<c10d::Work> start_bf16_allreduce(ProcessGroup& pg, const torch::Tensor& bucket, torch::Tensor& wire);

// After the work was waited for: the sum, back into `bucket` in its dtype.
void finish_bf16_allreduce(const torch::Tensor& wire, torch::Tensor& bucket);

}  // namespace ddp
