// defines: plan_buckets — how a model's parameters are packed into flat gradient buckets, in
//          PyTorch DDP's order and sizes (DistributedDataParallel and ZeroDataParallel share it),
//          plan_flat and padded_numel — the same layout for a group an engine chooses (FSDP's
//          units), padded so that every rank's slice is equal, and
//          storage_slice — a tensor over part of a flat buffer that autograd does not call a view.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace ddp {

struct BucketPlan {
  std::vector<size_t> params;    // indices into the parameter list, in the order they sit in the bucket
  std::vector<int64_t> offsets;  // where each one starts in the flat bucket (elements)
  int64_t numel = 0;             // elements of all its parameters
};

// As PyTorch's DDP: parameters in reverse registration order (gradients become ready roughly last
// layer first); the first bucket holds about 1 MiB (or less if bucket_mb is), so the first
// communication starts early in backward; a bucket closes once it holds at least its cap (a big
// tensor closes the bucket it joins instead of waiting in the next one) or when the next
// parameter has another dtype or device.
std::vector<BucketPlan> plan_buckets(const std::vector<torch::Tensor>& params, double bucket_mb);

// All of `params` in the order given, one after another, as one flat buffer: the layout of a group an
// engine chooses itself (FSDP's units), in the shape plan_buckets gives a bucket.
BucketPlan plan_flat(const std::vector<torch::Tensor>& params);

// `numel` rounded up to a multiple of `multiple`: a flat buffer whose `multiple` slices are equal
// (ZeRO's buckets and FSDP's units, padded to the world size).
int64_t padded_numel(int64_t numel, int64_t multiple);

// A contiguous tensor of `sizes` on `flat`'s storage from storage element `start` (absolute,
// not relative to flat's offset). Made with set_(), not narrow()/view(): autograd marks views,
// and the optimizers' zero_grad() calls detach_() on .grad, which refuses views.
torch::Tensor storage_slice(const torch::Tensor& flat, int64_t start, torch::IntArrayRef sizes);

}  // namespace ddp
