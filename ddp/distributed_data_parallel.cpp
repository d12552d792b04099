#include "ddp/distributed_data_parallel.h"

#include <algorithm>

#include "ddp/error.h"
#include "ddp/model_broadcast.h"

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
  broadcast_from_rank0(*module_, names_, params_, *pg_, options_.broadcast_buffers);
  build_buckets(options_.bucket_mb);
  hooks_ = std::make_unique<GradientHooks>(params_, [this](size_t i) { on_gradient_ready(i); });
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::build_buckets(double bucket_mb) {
  bucket_of_.assign(params_.size(), 0);
  for (auto& plan : plan_buckets(params_, bucket_mb)) {
    Bucket b;
    b.params = std::move(plan.params);
    b.offsets = std::move(plan.offsets);
    b.flat = torch::zeros({plan.numel}, params_[b.params[0]].options().requires_grad(false));
    b.world_size = torch::scalar_tensor(static_cast<double>(pg_->size()), b.flat.scalar_type());
    b.pending = b.params.size();
    for (size_t i : b.params) bucket_of_[i] = buckets_.size();
    buckets_.push_back(std::move(b));
  }
  ready_.assign(params_.size(), 0);
}

void GradientReducer::start_backward() {
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
  for (size_t k = 0; k < sent; ++k) pg_->wait(buckets_[k].work, "gradient allreduce of an interrupted backward");
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
// bucket saves a pass. After the first step .grad usually is this very slice (see finish_backward).
// A parameter without .grad enters as zero. Returns the bucket's count of parameters still missing.
size_t GradientReducer::put_into_bucket(size_t i) {
  ready_[i] = 1;
  Bucket& b = buckets_[bucket_of_[i]];
  const auto slot = std::find(b.params.begin(), b.params.end(), i) - b.params.begin();
  auto slice = b.flat.narrow(0, b.offsets[slot], params_[i].numel());
  const torch::Tensor& grad = params_[i].grad();
  if (!grad.defined())
    slice.zero_();
  else if (grad.data_ptr() == slice.data_ptr())
    slice.div_(b.world_size);
  else
    torch::div_out(slice, grad.reshape({-1}), b.world_size);
  return --b.pending;
}

void GradientReducer::launch_ready_buckets() {
  // Strictly in bucket order: every rank must issue the same collectives in the same order.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    std::vector<torch::Tensor> tensors{b.flat};
    b.work = pg_->allreduce_sum_async(tensors);
  }
}

void GradientReducer::finish_backward() {
  in_backward_ = false;
  torch::NoGradGuard no_grad;
  std::vector<char> keep_undefined(params_.size(), 0);
  if (options_.find_unused_parameters) {
    // Which parameters have a gradient on any rank (PyTorch's "local used map"): one that has none
    // anywhere keeps .grad undefined. Taken before the buckets fill the gaps with zeros.
    std::vector<int32_t> mine(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) mine[i] = params_[i].grad().defined() ? 1 : 0;
    auto has_grad = torch::tensor(mine, torch::kInt32).to(params_[0].device());
    if (next_bucket_ < buckets_.size()) {
      // A parameter without a gradient in this pass enters as its accumulated .grad (earlier
      // no_sync passes), or as zero.
      for (size_t i = 0; i < params_.size(); ++i)
        if (!ready_[i]) put_into_bucket(i);
      launch_ready_buckets();
    }
    std::vector<torch::Tensor> mask{has_grad};
    pg_->wait(pg_->allreduce_sum_async(mask), "allreduce of which parameters have gradients");
    const auto anywhere = has_grad.cpu();
    const auto counts = anywhere.accessor<int32_t, 1>();
    for (size_t i = 0; i < params_.size(); ++i) keep_undefined[i] = counts[static_cast<int64_t>(i)] == 0;
  } else if (next_bucket_ < buckets_.size()) {
    std::string unused;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) unused += (unused.empty() ? "" : ", ") + names_[i];
    // Drain what was launched so the group stays usable, then say which parameters were missed.
    for (size_t k = 0; k < next_bucket_; ++k) pg_->wait(buckets_[k].work, "gradient allreduce");
    throw Error("these parameters received no gradient in this backward pass: " + unused,
                "make every parameter take part in the loss, or construct DistributedDataParallel with "
                "find_unused_parameters = true (--find-unused-parameters) to treat them as zero");
  }
  point_grads_at_buckets(keep_undefined);
}

// Waits for every bucket and makes each .grad its averaged slice of the bucket (no copy back). The
// next backward accumulates into it in place, or, after zero_grad() set it to none, into a new
// tensor that is copied in.
void GradientReducer::point_grads_at_buckets(const std::vector<char>& keep_undefined) {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    pg_->wait(b.work, "gradient allreduce (bucket " + std::to_string(k + 1) + " of " +
                          std::to_string(buckets_.size()) + ")");
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t i = b.params[slot];
      if (keep_undefined[i]) continue;
      torch::Tensor& p = params_[i];
      const int64_t start = b.flat.storage_offset() + b.offsets[slot];
      const auto* where = static_cast<const char*>(b.flat.storage().data()) + start * b.flat.element_size();
      if (p.grad().defined() && p.grad().data_ptr() == where) continue;
      p.mutable_grad() = storage_slice(b.flat, start, p.sizes());
    }
  }
}

}  // namespace ddp
