#include "ddp/distributed_data_parallel.h"

#include <algorithm>

#include "ddp/detail/comm_hooks.h"
#include "ddp/detail/model_broadcast.h"
#include "ddp/error.h"
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
  std::vector<std::vector<size_t>> members;
  for (const auto& b : buckets_) members.push_back(b.params);
  BucketSchedule::Steps steps{
      .start =
          [this] {
            if (before_sync_) before_sync_();  // Join: first, so that a failure there leaves nothing half-sent
            for (auto& b : buckets_) b.work.reset();
          },
      .put = [this](size_t i, size_t k, size_t slot) { put_into_bucket(i, k, slot); },
      .launch = [this](size_t k) { launch(k); },
      .wait_for_sent =
          [this](size_t sent, bool interrupted) {
            for (size_t k = 0; k < sent; ++k)
              wait_for(buckets_[k].work,
                       interrupted ? "gradient allreduce of an interrupted backward" : "gradient allreduce");
          },
      .finish = [this] { finish_backward(); },
  };
  schedule_ = std::make_unique<BucketSchedule>(
      params_, names_, members, std::move(steps),
      BucketSchedule::Settings{
          .engine = "DistributedDataParallel",
          .unused_hint = "make every parameter take part in the loss, or construct DistributedDataParallel with "
                         "DdpOptions::find_unused_parameters = true to treat them as zero",
          .fill_missing = options_.find_unused_parameters,
          .rank = pg_->rank(),
      });
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::build_buckets(double bucket_mb) {
  for (auto& plan : plan_buckets(params_, bucket_mb)) {
    Bucket b;
    b.params = std::move(plan.params);
    b.offsets = std::move(plan.offsets);
    b.flat = torch::zeros({plan.numel}, params_[b.params[0]].options().requires_grad(false));
    b.flat_list = {b.flat};
    for (size_t slot = 0; slot < b.params.size(); ++slot)
      b.slices.push_back(b.flat.narrow(0, b.offsets[slot], params_[b.params[slot]].numel()));
    b.world_size = torch::scalar_tensor(static_cast<double>(pg_->size()), b.flat.scalar_type());
    buckets_.push_back(std::move(b));
  }
  for (size_t k = 0; k < buckets_.size(); ++k)
    buckets_[k].what =
        "gradient allreduce (bucket " + std::to_string(k + 1) + " of " + std::to_string(buckets_.size()) + ")";
  keep_undefined_.assign(params_.size(), 0);
  if (options_.find_unused_parameters) {
    used_here_ = torch::zeros({static_cast<int64_t>(params_.size())}, torch::kInt32);
    used_anywhere_ = torch::zeros_like(used_here_, torch::TensorOptions().device(params_[0].device()));
    used_list_ = {used_anywhere_};
  }
}

// Average = sum over ranks of (grad / world size): Gloo has no AVG. Dividing on the way into the
// bucket saves a pass (a division by 1 changes nothing and is skipped). After the first step .grad
// usually is this very slice (see finish_backward). A parameter without .grad enters as zero.
void GradientReducer::put_into_bucket(size_t i, size_t k, size_t slot) {
  Bucket& b = buckets_[k];
  torch::Tensor& slice = b.slices[slot];
  const torch::Tensor& grad = params_[i].grad();
  const bool divide = pg_->size() > 1;
  if (!grad.defined())
    slice.zero_();
  else if (grad.data_ptr() != slice.data_ptr())
    divide ? torch::div_out(slice, grad.reshape({-1}), b.world_size) : slice.copy_(grad.reshape({-1}));
  else if (divide)
    slice.div_(b.world_size);
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

void GradientReducer::launch(size_t k) {
  Bucket& b = buckets_[k];
  b.work = options_.bf16_compress ? start_bf16_allreduce(*pg_, b.flat, b.wire) : sum_over_ranks(b.flat_list);
  record_collective(b.work, b.what, b.flat.numel() * static_cast<int64_t>(b.flat.element_size()));  // timeline.h
}

// Every bucket was sent (the schedule checked that every parameter had a gradient, unless
// find_unused_parameters).
void GradientReducer::finish_backward() {
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
    // A parameter without a gradient in this pass enters as its accumulated .grad (earlier
    // no_sync passes), or as zero.
    schedule_->put_missing();
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
  point_grads_at_buckets();
}

void GradientReducer::shadow_backward() {
  DDP_CHECK(!schedule_->in_backward(), "a joined rank cannot shadow the others while its own backward runs",
            "call Join::finish() after this rank's last step, outside backward()");
  torch::NoGradGuard no_grad;
  // The same collectives, in the same order, as finish_backward on the other ranks: the buckets,
  // then (find_unused_parameters) which parameters have a gradient; this rank adds zeros to both.
  for (auto& b : buckets_) b.flat.zero_();
  for (size_t k = 0; k < buckets_.size(); ++k) launch(k);
  c10::intrusive_ptr<c10d::Work> used_work;
  if (options_.find_unused_parameters) {
    used_anywhere_.zero_();
    used_work = sum_over_ranks(used_list_);
  }
  for (auto& b : buckets_) {
    wait_for(b.work, b.what + ", shadowed by a joined rank");
    if (options_.bf16_compress) finish_bf16_allreduce(b.wire, b.flat);
    b.work.reset();
  }
  wait_for(used_work, "allreduce of which parameters have gradients, shadowed by a joined rank");
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

namespace {

class DdpJoinHook : public JoinHook {
 public:
  DdpJoinHook(GradientReducer& reducer, ForwardSync* forward, std::shared_ptr<torch::nn::Module> module)
      : reducer_(reducer), forward_(forward), module_(std::move(module)) {}

  void set_notifications(std::function<void()> notify, std::function<int()> buffer_source) override {
    reducer_.set_before_sync(std::move(notify));
    if (forward_) forward_->set_buffer_source(std::move(buffer_source));
  }
  void main_hook() override { reducer_.shadow_backward(); }
  void shadow_buffer_broadcast(int root) override {
    DDP_CHECK(forward_, "Join: the other ranks broadcast buffers before a forward but this rank's model does not",
              "wrap the model the same way (DdpOptions::broadcast_buffers) on every rank");
    forward_->broadcast_buffers_from(root);
  }
  // PyTorch's _sync_final_model: every rank takes the last joiner's parameters and buffers (the
  // ranks that joined early did not step their optimizers for the steps they shadowed).
  void post_hook(int last_joiner) override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> state = module_->parameters(/*recurse=*/true);
    for (const auto& b : module_->buffers(/*recurse=*/true)) state.push_back(b);
    broadcast_tensors(state, last_joiner, reducer_.process_group(),
                      "Join: broadcast of the final parameters and buffers from rank " + std::to_string(last_joiner));
  }

 private:
  GradientReducer& reducer_;
  ForwardSync* forward_;
  std::shared_ptr<torch::nn::Module> module_;
};

}  // namespace

std::unique_ptr<JoinHook> make_ddp_join_hook(GradientReducer& reducer, ForwardSync* forward,
                                             std::shared_ptr<torch::nn::Module> module) {
  return std::make_unique<DdpJoinHook>(reducer, forward, std::move(module));
}

}  // namespace ddp
