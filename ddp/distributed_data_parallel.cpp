#include "ddp/distributed_data_parallel.h"

#include <algorithm>

#include "ddp/detail/comm_hooks.h"
#include "ddp/error.h"

namespace ddp {

GradientReducer::GradientReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                                 DdpOptions options)
    : module_(std::move(module)),
      options_(options),
      core_(std::make_unique<EngineCore>(module_, std::move(pg), "DistributedDataParallel")) {
  set_up(options_.broadcast_buffers ? module_->buffers(/*recurse=*/true) : std::vector<torch::Tensor>{});
}

GradientReducer::GradientReducer(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> pg,
                                 DdpOptions options, const std::vector<torch::Tensor>& buffers)
    : options_(options), core_(std::make_unique<EngineCore>(std::move(params), std::move(pg), "TensorDataParallel")) {
  set_up(buffers);
}

void GradientReducer::set_up(const std::vector<torch::Tensor>& buffers) {
  core_->broadcast_from_rank0(buffers);
  core_->make_buckets(
      {
          .engine = "DistributedDataParallel",
          .unused_hint = "make every parameter take part in the loss, or construct DistributedDataParallel with "
                         "DdpOptions::find_unused_parameters = true to treat them as zero",
          .fill_missing = options_.find_unused_parameters,
          .bucket_mb = options_.bucket_mb,
      },
      *this);
  const auto& params = core_->parameters();
  wire_.resize(core_->buckets().size());
  keep_undefined_.assign(params.size(), 0);
  if (options_.find_unused_parameters) {
    used_here_ = torch::zeros({static_cast<int64_t>(params.size())}, torch::kInt32);
    used_anywhere_ = torch::zeros_like(used_here_, torch::TensorOptions().device(params[0].device()));
    used_list_ = {used_anywhere_};
  }
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::start() {
  if (before_sync_) before_sync_();  // Join: first, so that a failure there leaves nothing half-sent
}

void GradientReducer::launch(size_t k) {
  if (!options_.bf16_compress) return core_->allreduce(k);
  FlatBucket& b = core_->buckets()[k];
  b.work = start_bf16_allreduce(core_->process_group(), b.grads, wire_[k]);
  core_->record(k, b.work, "gradient allreduce " + b.label);
}

void GradientReducer::wait_for_sent(size_t sent, bool interrupted) {
  for (size_t k = 0; k < sent; ++k)
    core_->wait(k, interrupted ? "gradient allreduce of an interrupted backward" : "gradient allreduce");
}

void GradientReducer::wait_for_bucket(size_t k, const std::string& what) {
  core_->wait(k, what);
  if (options_.bf16_compress) finish_bf16_allreduce(wire_[k], core_->buckets()[k].grads);
}

// Every bucket was sent (the schedule checked that every parameter had a gradient, unless
// find_unused_parameters).
void GradientReducer::finish() {
  std::fill(keep_undefined_.begin(), keep_undefined_.end(), 0);
  if (!options_.find_unused_parameters) return point_grads_at_buckets();
  ProcessGroup& pg = core_->process_group();
  const auto& params = core_->parameters();
  // Which parameters have a gradient on any rank (PyTorch's "local used map"): one that has none
  // anywhere keeps .grad undefined. Taken before the buckets fill the gaps with zeros.
  auto* here = used_here_.data_ptr<int32_t>();
  bool all_used_here = true;
  for (size_t i = 0; i < params.size(); ++i) {
    here[i] = params[i].grad().defined() ? 1 : 0;
    all_used_here = all_used_here && here[i] != 0;
  }
  // A parameter without a gradient in this pass enters as its accumulated .grad (earlier
  // no_sync passes), or as zero.
  core_->schedule().put_missing();
  // The sum over ranks runs while the buckets finish. As in PyTorch's reducer, the host copies
  // it back (and so waits for it) only when a parameter had no gradient here: a parameter used
  // here is used somewhere. To a GPU through a pinned copy, without blocking: the copy reads
  // the pinned block later, which the caching host allocator keeps until then.
  if (used_anywhere_.is_cuda())
    used_anywhere_.copy_(used_here_.pin_memory(), /*non_blocking=*/true);
  else
    used_anywhere_.copy_(used_here_);
  c10::intrusive_ptr<c10d::Work> used_work;  // none at world size 1
  if (!pg.skips_collectives()) used_work = pg.allreduce_sum_async(used_list_);
  const std::string used_what = "allreduce of which parameters have gradients";
  if (!all_used_here) {
    // The host reads the sum: on NCCL it waits the way every host read does (watching for
    // failures, the timeout and a stop request), not blind inside a CUDA copy.
    if (used_work && pg.backend_name() == "nccl")
      pg.wait_on_host(used_work, used_what);
    else if (used_work)
      pg.wait(used_work, used_what);
    const auto anywhere = used_anywhere_.cpu();
    const auto* counts = anywhere.data_ptr<int32_t>();
    for (size_t i = 0; i < params.size(); ++i) keep_undefined_[i] = counts[i] == 0;
  }
  point_grads_at_buckets();
  // Before the next backward overwrites the mask (on a GPU this only orders the streams).
  if (all_used_here && used_work) pg.wait(used_work, used_what);
}

void GradientReducer::shadow_backward() {
  DDP_CHECK(!schedule().in_backward(), "a joined rank cannot shadow the others while its own backward runs",
            "call Join::finish() after this rank's last step, outside backward()");
  torch::NoGradGuard no_grad;
  ProcessGroup& pg = core_->process_group();
  auto& buckets = core_->buckets();
  // The same collectives, in the same order, as finish() on the other ranks: the buckets, then
  // (find_unused_parameters) which parameters have a gradient; this rank adds zeros to both.
  for (auto& b : buckets) b.grads.zero_();
  for (size_t k = 0; k < buckets.size(); ++k) launch(k);
  c10::intrusive_ptr<c10d::Work> used_work;
  if (options_.find_unused_parameters) {
    used_anywhere_.zero_();
    if (!pg.skips_collectives()) used_work = pg.allreduce_sum_async(used_list_);
  }
  for (size_t k = 0; k < buckets.size(); ++k)
    wait_for_bucket(k, "gradient allreduce " + buckets[k].label + ", shadowed by a joined rank");
  if (used_work) pg.wait(used_work, "allreduce of which parameters have gradients, shadowed by a joined rank");
}

// Waits for every bucket and makes each .grad its averaged slice of the bucket (no copy back).
void GradientReducer::point_grads_at_buckets() {
  for (size_t k = 0; k < core_->buckets().size(); ++k) {
    wait_for_bucket(k, "gradient allreduce " + core_->buckets()[k].label);
    core_->point_grads_at(k, keep_undefined_);
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
    broadcast_coalesced(state, last_joiner, reducer_.process_group(),
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
