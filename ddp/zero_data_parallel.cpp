#include "ddp/zero_data_parallel.h"

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

}  // namespace

ZeroReducer::ZeroReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                         ZeroOptions options)
    : module_(std::move(module)), options_(options) {
  DDP_CHECK(module_ && pg, "ZeroDataParallel needs a module and a process group", "create both first");
  DDP_CHECK(options_.stage == 1 || options_.stage == 2,
            "ZeRO stage " + std::to_string(options_.stage) + " is not available",
            "use " + setting_value(Setting::kZeroStage, "1") + " or " + setting_value(Setting::kZeroStage, "2"));
  core_ = std::make_unique<EngineCore>(module_, std::move(pg), "ZeroDataParallel");
  core_->broadcast_from_rank0(options_.broadcast_buffers ? module_->buffers(/*recurse=*/true)
                                                         : std::vector<torch::Tensor>{});
  core_->make_buckets(
      {
          .engine = "ZeroDataParallel",
          .unused_hint = "make every parameter take part in the loss (ZeroDataParallel has no "
                         "find_unused_parameters), or set requires_grad(false) on parameters that are not trained",
          .fill_missing = false,
          .bucket_mb = options_.bucket_mb,
          .pad_to = process_group().size(),
          .keep_gradients = options_.stage == 1,
      },
      *this);
  move_parameters_into_buckets();
  // The parameters' old storage, now copied into the buckets, goes back to the kernel: the
  // allocator's keep-freed policy (host_memory.h), when configure_process applied it, would
  // otherwise hold it resident for good.
  if (!parameters()[0].is_cuda() && process_settings().keep_freed_host_memory) release_freed_host_memory();
}

ZeroReducer::~ZeroReducer() = default;

void ZeroReducer::move_parameters_into_buckets() {
  torch::NoGradGuard no_grad;
  const int64_t n = process_group().size();
  const auto& params = parameters();
  for (const auto& flat : core_->buckets()) {
    Shard s;
    s.numel = flat.padded_numel / n;
    const auto options = params[flat.plan.params[0]].options().requires_grad(false);
    s.params = torch::zeros({flat.padded_numel}, options);
    for (size_t slot = 0; slot < flat.plan.params.size(); ++slot) {
      torch::Tensor p = params[flat.plan.params[slot]];
      // The parameter moves into the flat buffer: same tensor object (the module and any
      // optimizer keep it), its data now a slice of the bucket (PyTorch's `p.data = view`).
      auto place = storage_slice(s.params, s.params.storage_offset() + flat.plan.offsets[slot], p.sizes());
      place.copy_(p);
      p.set_data(place);
    }
    if (options_.stage == 2) s.grad_shard = torch::zeros({s.numel}, options);
    shards_.push_back(std::move(s));
  }
}

std::vector<ZeroBucket> ZeroReducer::buckets() const {
  std::vector<ZeroBucket> out;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const FlatBucket& flat = core_->buckets()[k];
    out.push_back(
        {flat.plan, flat.padded_numel, shards_[k].numel, shards_[k].params, flat.grads, shards_[k].grad_shard});
  }
  return out;
}

std::vector<ShardedParameter> ZeroReducer::sharded_parameters() const {
  std::vector<ShardedParameter> out;
  const auto& params = parameters();
  for (size_t i = 0; i < params.size(); ++i)
    out.push_back({parameter_names()[i], params[i].sizes().vec(), params[i].scalar_type()});
  return out;
}

std::vector<ShardedGroup> ZeroReducer::sharded_groups() const {
  std::vector<ShardedGroup> out;
  for (const auto& flat : core_->buckets())
    out.push_back({flat.plan.params, flat.plan.offsets, flat.plan.numel, flat.padded_numel});
  return out;
}

std::vector<torch::Tensor> ZeroReducer::parameter_shards() {
  std::vector<torch::Tensor> out;
  const int rank = process_group().rank();
  for (auto& s : shards_) out.push_back(s.params.narrow(0, rank * s.numel, s.numel));
  return out;
}

std::vector<torch::Tensor> ZeroReducer::gradient_shards() {
  std::vector<torch::Tensor> out;
  const int rank = process_group().rank();
  for (size_t k = 0; k < shards_.size(); ++k) {
    const Shard& s = shards_[k];
    out.push_back(options_.stage == 1 ? core_->buckets()[k].grads.narrow(0, rank * s.numel, s.numel) : s.grad_shard);
  }
  return out;
}

void ZeroReducer::clear_gradients(bool set_to_none) {
  for (auto p : parameters()) {  // as torch::optim::Optimizer::zero_grad
    if (!p.mutable_grad().defined()) continue;
    p.mutable_grad().detach_();
    if (set_to_none)
      p.mutable_grad().reset();
    else
      p.mutable_grad().zero_();
  }
  for (auto& s : shards_) s.has_gradient = false;  // the next reduce-scatter writes instead of adding
  has_gradients_ = false;
}

void ZeroReducer::all_gather_parameters() {
  std::vector<torch::Tensor> flats;
  for (auto& s : shards_) flats.push_back(s.params);
  all_gather_slices(process_group(), flats, "parameter all-gather after the optimizer step");
}

// Stage 2: a bucket's buffer is made when its first gradient comes (the core then divides the
// gradients into it and releases .grad: from there on the bucket holds it).
void ZeroReducer::before_new_buffer(size_t /*bucket*/) {
  while (in_flight_.size() >= kMaxBucketsInFlight) wait_for_oldest_bucket_in_flight(true);
}

void ZeroReducer::launch(size_t k) {
  if (options_.stage == 1) return core_->allreduce(k);  // one rank: the bucket is the average already
  FlatBucket& b = core_->buckets()[k];
  Shard& s = shards_[k];
  s.reduce_scatter = ReduceScatter(process_group(), b.grads, s.grad_shard, s.has_gradient);
  core_->record(k, s.reduce_scatter.work(), "gradient reduce-scatter " + b.label);
  in_flight_.push_back(k);
}

void ZeroReducer::wait_for_oldest_bucket_in_flight(bool keep_result) {
  const size_t k = in_flight_.front();
  in_flight_.pop_front();
  FlatBucket& b = core_->buckets()[k];
  Shard& s = shards_[k];
  s.reduce_scatter.finish("gradient reduce-scatter " + b.label);
  s.has_gradient = keep_result;
  b.grads = torch::Tensor();  // its slice is in grad_shard now
}

void ZeroReducer::wait_for_sent(size_t sent, bool /*interrupted*/) { drain_sent_buckets(sent, false); }

void ZeroReducer::drain_sent_buckets(size_t sent, bool keep_results) {
  auto& buckets = core_->buckets();
  if (options_.stage == 1) {
    for (size_t k = 0; k < sent; ++k) core_->wait(k, "gradient allreduce " + buckets[k].label);
  } else {
    while (!in_flight_.empty()) wait_for_oldest_bucket_in_flight(keep_results);
    for (auto& b : buckets) b.grads = torch::Tensor();  // buckets that were filling
  }
}

// Every bucket was sent (the schedule checked that every parameter had a gradient).
void ZeroReducer::finish() {
  drain_sent_buckets(core_->buckets().size(), /*keep_results=*/true);
  if (options_.stage == 1)  // .grad becomes its averaged slice of the bucket, as in DistributedDataParallel
    for (size_t k = 0; k < core_->buckets().size(); ++k) core_->point_grads_at(k);
  has_gradients_ = true;
}

}  // namespace ddp
