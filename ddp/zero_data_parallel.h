// defines: ZeroDataParallel — DeepSpeed's ZeRO stages 1 and 2 for any torch::nn::Module, in the shape
//          of DistributedDataParallel: wrap the model, train as before, step a ddp::ShardedAdamW.
//   * Parameters live in flat buckets (the DDP module's bucket order and sizes, padded to a multiple
//     of the world size); the module's parameters are views into them. Rank r owns slice r of every
//     bucket: the optimizer keeps Adam's moments for that slice only (1/N of the state) and updates
//     only that slice; the slices are then all-gathered, so every rank holds the whole model again.
//     Slices of flat buckets, as DeepSpeed's ZeRO and PyTorch's FSDP cut them, not whole parameters
//     per rank: every rank owns exactly 1/N however unequal the layers (a model with one big layer
//     cannot be split fairly by parameters), and reduce-scatter and all-gather need equal slices
//     of one buffer.
//   * Stage 1: during backward each full bucket's gradients are allreduced (averaged) as in DDP,
//     overlapped with the rest of backward; .grad points into the buckets afterwards.
//   * Stage 2: each full bucket is reduce-scattered instead: a rank receives only the averaged
//     gradients of its own slice and keeps only those (1/N of the gradients). .grad is released as
//     soon as it is in a bucket, so after backward the parameters have no .grad.
//   * no_sync() skips communication for gradient accumulation: .grad accumulates locally (full size,
//     also under stage 2) and the next synchronized backward reduces the sum (or
//     set_requires_gradient_sync(false) until it is set to true again: no_sync.h). Two synchronized
//     backward passes without zero_grad() in between add up, as in DDP.
//   * A parameter without a gradient is an error naming it; an exception inside backward abandons
//     that pass as in DistributedDataParallel (an error if part of it had been sent).
//   * Move the model to its device before wrapping it; every rank must build the same model.
#pragma once

#include <torch/torch.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ddp/detail/bucket_schedule.h"  // defines: BucketSchedule
#include "ddp/detail/engine_core.h"      // defines: EngineCore, BucketStrategy
#include "ddp/detail/sharded_collectives.h"
#include "ddp/joinable.h"       // defines: Joinable (what ddp::Join uses)
#include "ddp/module_holder.h"  // defines: ModuleImpl, HolderOf (a holder or an ...Impl)
#include "ddp/no_sync.h"        // defines: NoSync (no_sync()'s guard)
#include "ddp/process_group.h"
#include "ddp/sharded_state.h"  // defines: ShardedState (what ShardedAdamW and the sharded snapshots use)

namespace ddp {

// How ZeroDataParallel shards (stage) and buckets.
struct ZeroOptions {
  int stage = 2;                  // 1: optimizer state sharded; 2: gradients too
  double bucket_mb = 25;          // as DDP's bucket_cap_mb (DeepSpeed: reduce_bucket_size)
  bool broadcast_buffers = true;  // at construction
};

// What one flat bucket holds (a description: the tensors are shared, not copied). Rank r owns
// elements [r * shard_numel, (r + 1) * shard_numel).
struct ZeroBucket {
  BucketPlan plan;
  int64_t padded_numel = 0;  // plan.numel rounded up to a multiple of the world size (zeros at the end)
  int64_t shard_numel = 0;   // padded_numel / world size
  torch::Tensor params;      // [padded_numel]: the module's parameters are views into it
  torch::Tensor grads;       // stage 1: [padded_numel], .grad points into it; stage 2: only while it fills
  torch::Tensor grad_shard;  // stage 2: [shard_numel], this rank's averaged gradients
};

// The engine behind ZeroDataParallel (no template: compiled once): the engine core (engine_core.h)
// with ZeRO's strategy, each bucket padded to a multiple of the world size and allreduced (stage 1)
// or reduce-scattered (stage 2). Its shards, as ShardedState (sharded_state.h): the buckets.
class ZeroReducer : public ShardedState, private BucketStrategy {
 public:
  ZeroReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg, ZeroOptions options);
  ~ZeroReducer() override;
  ZeroReducer(const ZeroReducer&) = delete;
  ZeroReducer& operator=(const ZeroReducer&) = delete;

  int stage() const { return options_.stage; }
  int zero_stage() const override { return options_.stage; }
  const ZeroOptions& options() const { return options_; }
  ProcessGroup& process_group() override { return core_->process_group(); }
  torch::nn::Module& module() override { return *module_; }
  const std::vector<torch::Tensor>& parameters() const { return core_->parameters(); }
  const std::vector<std::string>& parameter_names() const { return core_->names(); }
  std::vector<ZeroBucket> buckets() const;
  size_t bucket_count() const { return shards_.size(); }

  BucketSchedule& schedule() { return core_->schedule(); }  // no_sync() and the backward pass's state

  // What the sharded optimizer works on, one tensor per bucket, all of shard_numel elements:
  // this rank's slice of the flat parameters (views) and of the averaged gradients.
  std::vector<torch::Tensor> parameter_shards() override;
  std::vector<torch::Tensor> gradient_shards() override;
  // True after a synchronized backward since the last clear_gradients().
  bool has_gradients() const override { return has_gradients_; }
  // zero_grad(): .grad to none (or zero), stage 2's gradient slices emptied.
  void clear_gradients(bool set_to_none) override;
  // After the optimizer updated this rank's slices: every rank gets every slice.
  void all_gather_parameters();

  // ShardedState (sharded_state.h): the buckets are the groups.
  std::string sharded_engine() const override { return "ZeRO stage " + std::to_string(options_.stage); }
  std::vector<ShardedParameter> sharded_parameters() const override;
  std::vector<ShardedGroup> sharded_groups() const override;
  void parameter_shards_changed() override { all_gather_parameters(); }
  int64_t step_group_bytes() const override { return static_cast<int64_t>(options_.bucket_mb * 1024 * 1024); }

 private:
  // Bucket k's part that is ZeRO's own (the core holds its plan and gradient buffer).
  struct Shard {
    int64_t numel = 0;             // shard_numel
    torch::Tensor params;          // [padded_numel]: the module's parameters are views into it
    torch::Tensor grad_shard;      // stage 2: [numel], this rank's averaged gradients
    bool has_gradient = false;     // stage 2: grad_shard holds gradients not yet zeroed
    ReduceScatter reduce_scatter;  // stage 2
  };
  void move_parameters_into_buckets();
  // BucketStrategy: the schedule's steps (bucket_schedule.h).
  void before_new_buffer(size_t bucket) override;
  void launch(size_t bucket) override;
  void wait_for_sent(size_t sent, bool interrupted) override;
  void finish() override;
  void wait_for_oldest_bucket_in_flight(bool keep_result);
  void drain_sent_buckets(size_t sent, bool keep_results);  // sent: buckets [0, sent) were launched

  std::shared_ptr<torch::nn::Module> module_;
  ZeroOptions options_;
  std::vector<Shard> shards_;
  std::deque<size_t> in_flight_;  // stage 2: buckets whose reduce-scatter runs, oldest first
  bool has_gradients_ = false;
  // Last: destroyed first, so no hook runs on a half-gone engine.
  std::unique_ptr<EngineCore> core_;
};

// Ranks with different numbers of batches: ZeRO cannot join (each rank owns a slice of every
// optimizer step, which no other rank can run for one that has left the loop). ddp::Join(model,
// batches) (join.h, through Joinable) checks at once that the counts are equal.
// M as DistributedDataParallel's: the module or its LibTorch holder (module_holder.h).
template <typename M>
class ZeroDataParallel : public Joinable {
  static_assert(check_module_type<M>());

 public:
  using Impl = WrappedModule<M>;

  // Collective, as DistributedDataParallel's: the same model on every rank gets rank 0's weights,
  // then lives in the flat buckets.
  ZeroDataParallel(std::shared_ptr<Impl> module, std::shared_ptr<ProcessGroup> pg, ZeroOptions options = {})
      : module_(std::move(module)), reducer_(std::make_shared<ZeroReducer>(module_, std::move(pg), options)) {}
  template <HolderOf<Impl> H>
  ZeroDataParallel(const H& holder, std::shared_ptr<ProcessGroup> pg, ZeroOptions options = {})
      : ZeroDataParallel(holder.ptr(), std::move(pg), options) {}

  // The module's forward, as DistributedDataParallel's (model(x), model.forward(x)): ZeRO does its
  // work in backward and in the optimizer's step, so nothing runs around it; the same call as DDP's.
  template <typename... Args>
  auto forward(Args&&... args) -> decltype(std::declval<Impl&>().forward(std::forward<Args>(args)...)) {
    return module_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  auto operator()(Args&&... args) -> decltype(std::declval<Impl&>().forward(std::forward<Args>(args)...)) {
    return module_->forward(std::forward<Args>(args)...);
  }
  Impl* operator->() const { return module_.get(); }               // the plain module: parameters(), train(), ...
  const std::shared_ptr<Impl>& module() const { return module_; }  // the plain module (evaluation)
  int stage() const { return reducer_->stage(); }
  size_t bucket_count() const { return reducer_->bucket_count(); }
  const std::shared_ptr<ZeroReducer>& reducer() const { return reducer_; }
  std::shared_ptr<ShardedState> sharded_state() const { return reducer_; }  // what ShardedAdamW steps on

  // Joinable (joinable.h): no hook (see above).
  ProcessGroup& join_process_group() override { return reducer_->process_group(); }
  std::unique_ptr<JoinHook> join_hook() override { return nullptr; }
  std::string join_name() const override { return "ZeroDataParallel (ZeRO stage " + std::to_string(stage()) + ")"; }

  // Gradient accumulation (no_sync.h): backward only accumulates locally (no communication) while a
  // NoSync lives, or while requires_gradient_sync() is false.
  using NoSync = ddp::NoSync;
  [[nodiscard]] NoSync no_sync() { return NoSync(reducer_->schedule()); }
  void set_requires_gradient_sync(bool on) { reducer_->schedule().set_requires_gradient_sync(on); }
  bool requires_gradient_sync() const { return reducer_->schedule().requires_gradient_sync(); }

 private:
  std::shared_ptr<Impl> module_;
  std::shared_ptr<ZeroReducer> reducer_;
};
// ZeroDataParallel(net, pg): ZeroDataParallel<Net> for a holder, ZeroDataParallel<NetImpl> for a shared_ptr.
template <ModuleHolderType H>
ZeroDataParallel(const H&, std::shared_ptr<ProcessGroup>, ZeroOptions = {}) -> ZeroDataParallel<H>;
template <typename T>
ZeroDataParallel(std::shared_ptr<T>, std::shared_ptr<ProcessGroup>, ZeroOptions = {}) -> ZeroDataParallel<T>;

}  // namespace ddp
