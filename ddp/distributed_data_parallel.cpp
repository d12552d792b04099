#include "ddp/distributed_data_parallel.h"

#include <algorithm>

#include "ddp/comm_hooks.h"
#include "ddp/error.h"
#include "ddp/model_broadcast.h"
#include "ddp/timeline.h"

namespace ddp {

GradientReducer::GradientReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                                 DdpOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  DDP_CHECK(module_ && pg_, "DistributedDataParallel needs a module and a process group", "create both first");
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  DDP_CHECK(!params_.empty(), "the module has no parameter that requires a gradient", "nothing to train");
  start(options_.broadcast_buffers ? module_->buffers(/*recurse=*/true) : std::vector<torch::Tensor>{});
}

GradientReducer::GradientReducer(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> pg,
                                 DdpOptions options, const std::vector<torch::Tensor>& buffers)
    : pg_(std::move(pg)), options_(options), params_(std::move(params)) {
  DDP_CHECK(pg_, "TensorDataParallel needs a process group", "create it first (init_process_group)");
  DDP_CHECK(!params_.empty(), "TensorDataParallel got no parameter tensors", "pass the tensors to train");
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    names_.push_back("params[" + std::to_string(i) + "]");
    DDP_CHECK(p.defined(), names_[i] + " is an undefined tensor", "pass defined tensors");
    DDP_CHECK(p.requires_grad() && p.is_leaf(), names_[i] + " is not a leaf tensor that requires a gradient",
              "pass the parameters themselves (made with requires_grad), not results computed from them");
    for (size_t j = 0; j < i; ++j)
      DDP_CHECK(!p.is_same(params_[j]), names_[i] + " is " + names_[j] + " again", "pass each tensor once");
  }
  start(buffers);
}

void GradientReducer::start(const std::vector<torch::Tensor>& buffers) {
  broadcast_from_rank0(names_, params_, buffers, *pg_);
  build_buckets(options_.bucket_mb);
  hooks_ = std::make_unique<GradientHooks>(params_, [this](size_t i) { on_gradient_ready(i); });
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::build_buckets(double bucket_mb) {
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (auto& plan : plan_buckets(params_, bucket_mb)) {
    Bucket b;
    b.params = std::move(plan.params);
    b.offsets = std::move(plan.offsets);
    b.flat = torch::zeros({plan.numel}, params_[b.params[0]].options().requires_grad(false));
    b.flat_list = {b.flat};
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t i = b.params[slot];
      bucket_of_[i] = buckets_.size();
      slot_of_[i] = slot;
      b.slices.push_back(b.flat.narrow(0, b.offsets[slot], params_[i].numel()));
    }
    b.world_size = torch::scalar_tensor(static_cast<double>(pg_->size()), b.flat.scalar_type());
    b.pending = b.params.size();
    buckets_.push_back(std::move(b));
  }
  for (size_t k = 0; k < buckets_.size(); ++k)
    buckets_[k].what =
        "gradient allreduce (bucket " + std::to_string(k + 1) + " of " + std::to_string(buckets_.size()) + ")";
  ready_.assign(params_.size(), 0);
  keep_undefined_.assign(params_.size(), 0);
  if (options_.find_unused_parameters) {
    used_here_ = torch::zeros({static_cast<int64_t>(params_.size())}, torch::kInt32);
    used_anywhere_ = torch::zeros_like(used_here_, torch::TensorOptions().device(params_[0].device()));
    used_list_ = {used_anywhere_};
  }
}

void GradientReducer::start_backward() {
  if (before_sync_) before_sync_();  // Join: first, so that a failure there leaves nothing half-sent
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  next_bucket_ = 0;
  // The callback runs once the whole backward pass is done, before backward() returns; an exception
  // that ends the pass first raises the flag instead (checked by the next pass).
  abandoned_ = hooks_->call_at_end_of_backward([this] { finish_backward(); });
  in_backward_ = true;
}

void GradientReducer::recover_from_abandoned_backward() {
  // Let the allreduces already started finish before their memory is reused: the other ranks
  // pair them with their own buckets of the same index.
  const size_t sent = next_bucket_;
  for (size_t k = 0; k < sent; ++k) wait_for(buckets_[k].work, "gradient allreduce of an interrupted backward");
  in_backward_ = false;
  next_bucket_ = 0;
  if (sent > 0)
    throw Error("a backward pass on rank " + std::to_string(pg_->rank()) + " ended part-way, after " +
                    std::to_string(sent) + " of " + std::to_string(buckets_.size()) +
                    " gradient buckets had been sent: the ranks are out of step",
                "do not catch an error from backward() and go on; end the run (a restart resumes from the "
                "last snapshot). Every rank must run the same backward passes");
}

void GradientReducer::on_gradient_ready(size_t i) {
  if (!sync_enabled_) return;  // no_sync(): accumulate locally
  // An accumulator fires once per backward pass: a second report means the earlier pass never
  // reached its end (an exception inside backward).
  if (in_backward_ && (abandoned_->load() || ready_[i])) recover_from_abandoned_backward();
  if (!in_backward_) start_backward();
  const torch::Tensor& grad = params_[i].grad();
  DDP_CHECK(grad.defined() && !grad.is_sparse(), "parameter '" + names_[i] + "' has no dense gradient",
            "DistributedDataParallel supports dense gradients only");
  if (put_into_bucket(i) == 0) launch_ready_buckets();
}

// Average = sum over ranks of (grad / world size): Gloo has no AVG. Dividing on the way into the
// bucket saves a pass (a division by 1 changes nothing and is skipped). After the first step .grad
// usually is this very slice (see finish_backward). A parameter without .grad enters as zero.
// Returns the bucket's count of parameters still missing.
size_t GradientReducer::put_into_bucket(size_t i) {
  ready_[i] = 1;
  Bucket& b = buckets_[bucket_of_[i]];
  torch::Tensor& slice = b.slices[slot_of_[i]];
  const torch::Tensor& grad = params_[i].grad();
  const bool divide = pg_->size() > 1;
  if (!grad.defined())
    slice.zero_();
  else if (grad.data_ptr() != slice.data_ptr())
    divide ? torch::div_out(slice, grad.reshape({-1}), b.world_size) : slice.copy_(grad.reshape({-1}));
  else if (divide)
    slice.div_(b.world_size);
  return --b.pending;
}

// One rank's sum is the rank's own tensors: at world size 1 nothing is sent (no work). c10d's Gloo
// path would hand the identity to its worker thread and back, recording it for the flight recorder
// on the way: measured here, more than the rest of DDP's work in a small model's step. Hooks,
// buckets and bucket views run as at any world size.
c10::intrusive_ptr<c10d::Work> GradientReducer::sum_over_ranks(std::vector<torch::Tensor>& tensors) {
  if (pg_->size() == 1) return {};
  return pg_->allreduce_sum_async(tensors);
}

void GradientReducer::wait_for(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  if (work) pg_->wait(work, what);
}

void GradientReducer::launch_ready_buckets() {
  // Strictly in bucket order: every rank must issue the same collectives in the same order.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    b.work = options_.bf16_compress ? start_bf16_allreduce(*pg_, b.flat, b.wire) : sum_over_ranks(b.flat_list);
    record_collective(b.work, b.what, b.flat.numel() * static_cast<int64_t>(b.flat.element_size()));  // timeline.h
  }
}

void GradientReducer::finish_backward() {
  in_backward_ = false;
  torch::NoGradGuard no_grad;
  std::fill(keep_undefined_.begin(), keep_undefined_.end(), 0);
  if (options_.find_unused_parameters) {
    // Which parameters have a gradient on any rank (PyTorch's "local used map"): one that has none
    // anywhere keeps .grad undefined. Taken before the buckets fill the gaps with zeros.
    auto* here = used_here_.data_ptr<int32_t>();
    bool all_used_here = true;
    for (size_t i = 0; i < params_.size(); ++i) {
      here[i] = params_[i].grad().defined() ? 1 : 0;
      all_used_here = all_used_here && here[i] != 0;
    }
    if (next_bucket_ < buckets_.size()) {
      // A parameter without a gradient in this pass enters as its accumulated .grad (earlier
      // no_sync passes), or as zero.
      for (size_t i = 0; i < params_.size(); ++i)
        if (!ready_[i]) put_into_bucket(i);
      launch_ready_buckets();
    }
    // The sum over ranks runs while the buckets finish. As in PyTorch's reducer, the host copies
    // it back (and so waits for it) only when a parameter had no gradient here: a parameter used
    // here is used somewhere. To a GPU through a pinned copy, without blocking: the copy reads
    // the pinned block later, which the caching host allocator keeps until then.
    if (used_anywhere_.is_cuda())
      used_anywhere_.copy_(used_here_.pin_memory(), /*non_blocking=*/true);
    else
      used_anywhere_.copy_(used_here_);
    auto used_work = sum_over_ranks(used_list_);
    if (!all_used_here) {
      // The host reads the sum: on NCCL it waits the way every host read does (watching for
      // failures, the timeout and a stop request), not blind inside a CUDA copy.
      if (used_work && pg_->backend_name() == "nccl")
        pg_->wait_on_host(used_work, "allreduce of which parameters have gradients");
      else
        wait_for(used_work, "allreduce of which parameters have gradients");
      const auto anywhere = used_anywhere_.cpu();
      const auto* counts = anywhere.data_ptr<int32_t>();
      for (size_t i = 0; i < params_.size(); ++i) keep_undefined_[i] = counts[i] == 0;
    }
    point_grads_at_buckets();
    // Before the next backward overwrites the mask (on a GPU this only orders the streams).
    if (all_used_here) wait_for(used_work, "allreduce of which parameters have gradients");
    return;
  }
  if (next_bucket_ < buckets_.size()) {
    std::string unused;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) unused += (unused.empty() ? "" : ", ") + names_[i];
    // Drain what was launched so the group stays usable, then say which parameters were missed.
    for (size_t k = 0; k < next_bucket_; ++k) wait_for(buckets_[k].work, "gradient allreduce");
    throw Error("these parameters received no gradient in this backward pass: " + unused,
                "make every parameter take part in the loss, or construct DistributedDataParallel with "
                "DdpOptions::find_unused_parameters = true to treat them as zero");
  }
  point_grads_at_buckets();
}

void GradientReducer::shadow_backward() {
  DDP_CHECK(!in_backward_, "a joined rank cannot shadow the others while its own backward runs",
            "call Join::finish() after this rank's last step, outside backward()");
  torch::NoGradGuard no_grad;
  // The same collectives, in the same order, as finish_backward on the other ranks: the buckets,
  // then (find_unused_parameters) which parameters have a gradient; this rank adds zeros to both.
  for (auto& b : buckets_) {
    b.flat.zero_();
    b.pending = 0;
  }
  next_bucket_ = 0;
  launch_ready_buckets();
  c10::intrusive_ptr<c10d::Work> used_work;
  if (options_.find_unused_parameters) {
    used_anywhere_.zero_();
    used_work = sum_over_ranks(used_list_);
  }
  for (auto& b : buckets_) {
    wait_for(b.work, b.what + ", shadowed by a joined rank");
    if (options_.bf16_compress) finish_bf16_allreduce(b.wire, b.flat);
    b.work.reset();
    b.pending = b.params.size();
  }
  wait_for(used_work, "allreduce of which parameters have gradients, shadowed by a joined rank");
  next_bucket_ = 0;
}

// Waits for every bucket and makes each .grad its averaged slice of the bucket (no copy back). The
// next backward accumulates into it in place, or, after zero_grad() set it to none, into a new
// tensor that is copied in.
void GradientReducer::point_grads_at_buckets() {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    wait_for(b.work, b.what);
    if (options_.bf16_compress) finish_bf16_allreduce(b.wire, b.flat);
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t i = b.params[slot];
      if (keep_undefined_[i]) continue;
      torch::Tensor& p = params_[i];
      const int64_t start = b.flat.storage_offset() + b.offsets[slot];
      const auto* where = static_cast<const char*>(b.flat.storage().data()) + start * b.flat.element_size();
      if (p.grad().defined() && p.grad().data_ptr() == where) continue;
      p.mutable_grad() = storage_slice(b.flat, start, p.sizes());
    }
  }
}

}  // namespace ddp
