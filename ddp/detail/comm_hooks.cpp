#include "ddp/detail/comm_hooks.h"

#include <vector>

namespace ddp {

c10::intrusive_ptr<c10d::Work> start_bf16_allreduce(ProcessGroup& pg, const torch::Tensor& bucket,
                                                    torch::Tensor& wire) {
  torch::NoGradGuard no_grad;
  if (!wire.defined() || wire.numel() != bucket.numel())
    wire = torch::empty_like(bucket, bucket.options().dtype(torch::kBFloat16));
  wire.copy_(bucket);  // the compression: round to bfloat16
  if (pg.skips_collectives()) return {};
  std::vector<torch::Tensor> tensors{wire};
  return pg.allreduce_sum_async(tensors);
}

void finish_bf16_allreduce(const torch::Tensor& wire, torch::Tensor& bucket) {
  torch::NoGradGuard no_grad;
  bucket.copy_(wire);  // the decompression: back to the bucket's dtype
}

}  // namespace ddp
