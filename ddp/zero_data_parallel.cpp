#include "ddp/zero_data_parallel.h"

#include "ddp/detail/model_broadcast.h"
#include "ddp/error.h"
#include "ddp/host_memory.h"
#include "ddp/process.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace ddp {
namespace {

// Stage 2: buckets whose reduce-scatter may run at once. A bucket needs its full-size buffer only
// until its reduce-scatter is done; bounding how many are in flight bounds that memory (DeepSpeed's
// overlap_comm double-buffers the same way).
constexpr size_t kMaxBucketsInFlight = 2;

std::string bucket_label(size_t k, size_t count) {
  return "(bucket " + std::to_string(k + 1) + " of " + std::to_string(count) + ")";
}

}  // namespace

ZeroReducer::ZeroReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                         ZeroOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  DDP_CHECK(module_ && pg_, "ZeroDataParallel needs a module and a process group", "create both first");
  DDP_CHECK(options_.stage == 1 || options_.stage == 2,
            "ZeRO stage " + std::to_string(options_.stage) + " is not available",
            "use " + setting_value(Setting::kZeroStage, "1") + " or " + setting_value(Setting::kZeroStage, "2"));
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  DDP_CHECK(!params_.empty(), "the module has no parameter that requires a gradient", "nothing to train");
  broadcast_from_rank0(*module_, names_, params_, *pg_, options_.broadcast_buffers);
  build_buckets();
  // The parameters' old storage, now copied into the buckets, goes back to the kernel: the
  // allocator's keep-freed policy (host_memory.h), when configure_process applied it, would
  // otherwise hold it resident for good.
  if (!params_[0].is_cuda() && process_settings().keep_freed_host_memory) release_freed_host_memory();
  std::vector<std::vector<size_t>> members;
  for (const auto& b : buckets_) members.push_back(b.plan.params);
  schedule_ = std::make_unique<BucketSchedule>(
      params_, names_, members,
      BucketSchedule::Steps{
          .start = nullptr,
          .put = [this](size_t i, size_t k, size_t slot) { put_into_bucket(i, k, slot); },
          .launch = [this](size_t k) { launch(k); },
          .wait_for_sent = [this](size_t sent, bool) { drain_sent_buckets(sent, /*keep_results=*/false); },
          .finish = [this] { finish_backward(); },
      },
      BucketSchedule::Settings{
          .engine = "ZeroDataParallel",
          .unused_hint = "make every parameter take part in the loss (ZeroDataParallel has no "
                         "find_unused_parameters), or set requires_grad(false) on parameters that are not trained",
          .fill_missing = false,
          .rank = pg_->rank(),
      });
}

ZeroReducer::~ZeroReducer() = default;

void ZeroReducer::build_buckets() {
  torch::NoGradGuard no_grad;
  const int64_t n = pg_->size();
  for (auto& plan : plan_buckets(params_, options_.bucket_mb)) {
    ZeroBucket b;
    b.plan = std::move(plan);
    b.padded_numel = (b.plan.numel + n - 1) / n * n;
    b.shard_numel = b.padded_numel / n;
    const auto& first = params_[b.plan.params[0]];
    const auto options = first.options().requires_grad(false);
    b.params = torch::zeros({b.padded_numel}, options);
    b.world_size = torch::scalar_tensor(static_cast<double>(n), first.scalar_type());
    for (size_t slot = 0; slot < b.plan.params.size(); ++slot) {
      const size_t i = b.plan.params[slot];
      // The parameter moves into the flat buffer: same tensor object (the module and any
      // optimizer keep it), its data now a slice of the bucket (PyTorch's `p.data = view`).
      auto place = storage_slice(b.params, b.params.storage_offset() + b.plan.offsets[slot], params_[i].sizes());
      place.copy_(params_[i]);
      params_[i].set_data(place);
    }
    if (options_.stage == 1)
      b.grads = torch::zeros({b.padded_numel}, options);
    else
      b.grad_shard = torch::zeros({b.shard_numel}, options);
    buckets_.push_back(std::move(b));
  }
}

std::vector<torch::Tensor> ZeroReducer::parameter_shards() {
  std::vector<torch::Tensor> shards;
  for (auto& b : buckets_) shards.push_back(b.params.narrow(0, pg_->rank() * b.shard_numel, b.shard_numel));
  return shards;
}

std::vector<torch::Tensor> ZeroReducer::gradient_shards() {
  std::vector<torch::Tensor> shards;
  for (auto& b : buckets_)
    shards.push_back(options_.stage == 1 ? b.grads.narrow(0, pg_->rank() * b.shard_numel, b.shard_numel)
                                         : b.grad_shard);
  return shards;
}

void ZeroReducer::clear_gradients(bool set_to_none) {
  for (auto& p : params_) {  // as torch::optim::Optimizer::zero_grad
    if (!p.mutable_grad().defined()) continue;
    p.mutable_grad().detach_();
    if (set_to_none)
      p.mutable_grad().reset();
    else
      p.mutable_grad().zero_();
  }
  for (auto& b : buckets_) b.shard_has_gradient = false;  // the next reduce-scatter writes instead of adding
  has_gradients_ = false;
}

void ZeroReducer::all_gather_parameters() {
  std::vector<torch::Tensor> flats;
  for (auto& b : buckets_) flats.push_back(b.params);
  all_gather_slices(*pg_, flats, "parameter all-gather after the optimizer step");
}

// Average = sum over ranks of (grad / world size): Gloo has no AVG, and dividing on the way into the
// bucket saves a pass. Stage 2 then releases .grad: from here on the bucket holds it.
void ZeroReducer::put_into_bucket(size_t i, size_t k, size_t slot) {
  ZeroBucket& b = buckets_[k];
  if (!b.grads.defined()) {  // stage 2: the bucket's first gradient
    while (in_flight_.size() >= kMaxBucketsInFlight) wait_for_oldest_bucket_in_flight(true);
    b.grads = torch::empty({b.padded_numel}, b.params.options());
    b.grads.narrow(0, b.plan.numel, b.padded_numel - b.plan.numel).zero_();
  }
  auto slice = b.grads.narrow(0, b.plan.offsets[slot], params_[i].numel());
  const torch::Tensor& grad = params_[i].grad();
  if (grad.data_ptr() == slice.data_ptr())
    slice.div_(b.world_size);
  else
    torch::div_out(slice, grad.reshape({-1}), b.world_size);
  if (options_.stage == 2) params_[i].mutable_grad().reset();
}

void ZeroReducer::launch(size_t k) {
  ZeroBucket& b = buckets_[k];
  if (options_.stage == 1) {
    if (pg_->size() == 1) return;  // one rank: the bucket is the average already
    std::vector<torch::Tensor> tensors{b.grads};
    b.allreduce = pg_->allreduce_sum_async(tensors);
  } else {
    b.reduce_scatter = ReduceScatter(*pg_, b.grads, b.grad_shard, b.shard_has_gradient);
    in_flight_.push_back(k);
  }
}

void ZeroReducer::wait_for_oldest_bucket_in_flight(bool keep_result) {
  const size_t k = in_flight_.front();
  in_flight_.pop_front();
  ZeroBucket& b = buckets_[k];
  b.reduce_scatter.finish("gradient reduce-scatter " + bucket_label(k, buckets_.size()));
  b.shard_has_gradient = keep_result;
  b.grads = torch::Tensor();  // its slice is in grad_shard now
}

void ZeroReducer::drain_sent_buckets(size_t sent, bool keep_results) {
  if (options_.stage == 1) {
    for (size_t k = 0; k < sent; ++k) {
      auto& b = buckets_[k];
      if (b.allreduce) pg_->wait(b.allreduce, "gradient allreduce " + bucket_label(k, buckets_.size()));
      b.allreduce.reset();
    }
  } else {
    while (!in_flight_.empty()) wait_for_oldest_bucket_in_flight(keep_results);
    for (auto& b : buckets_) b.grads = torch::Tensor();  // buckets that were filling
  }
}

// Every bucket was sent (the schedule checked that every parameter had a gradient).
void ZeroReducer::finish_backward() {
  drain_sent_buckets(buckets_.size(), /*keep_results=*/true);
  if (options_.stage == 1) {
    // .grad becomes its averaged slice of the bucket (no copy back), as in DistributedDataParallel.
    for (auto& b : buckets_) {
      for (size_t slot = 0; slot < b.plan.params.size(); ++slot) {
        torch::Tensor& p = params_[b.plan.params[slot]];
        const int64_t start = b.grads.storage_offset() + b.plan.offsets[slot];
        const auto* where = static_cast<const char*>(b.grads.storage().data()) + start * b.grads.element_size();
        if (p.grad().defined() && p.grad().data_ptr() == where) continue;
        p.mutable_grad() = storage_slice(b.grads, start, p.sizes());
      }
    }
  }
  has_gradients_ = true;
}

}  // namespace ddp
