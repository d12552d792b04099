// defines: FullyShardedDataParallel — fully sharded data parallel (PyTorch's FSDP / fully_shard,
//          DeepSpeed's ZeRO stage 3) for a torch::nn::Module: no rank holds the whole model, its
//          gradients or its optimizer state between steps.
//   * Units: the user names submodules of the root (e.g. each transformer block); every parameter
//     outside them forms the root unit. Each unit's parameters live as one flat buffer, padded to a
//     multiple of the world size; rank r keeps only slice r of it (its shard: 1/N).
//   * Forward: a unit's parameters are all-gathered just before its forward and freed after it
//     (reshard_after_forward; or kept until the end of backward). The model's forward must call each
//     unit as `ddp::call(unit, x)` (module_call.h): LibTorch has no forward hooks, so that call is
//     where the gather happens. The root unit is gathered for the whole of the root's forward.
//   * Backward: a hook on each unit's output gathers its parameters again before the unit's
//     backward; when all of a unit's gradients are ready, they are reduce-scattered (averaged over
//     the ranks) into the unit's gradient shard while backward goes on, and the full gradients and
//     parameters are freed. At most one reduce-scatter is in flight: the previous unit's lands (its
//     input freed) before the next one starts, as FSDP2. With prefetch, the next unit's all-gather
//     is started early (forward: in the order of the previous pass; backward: the unit before it).
//   * The optimizer steps on parameters(): the shards (float32 leaves whose .grad is this rank's
//     averaged gradient slice). Any optimizer over tensors works (ddp::ShardedAdamW keeps Adam's
//     moments for the shards and can be snapshotted; torch::optim::AdamW works too). The next
//     forward gathers the updated shards: there is no step-time all-gather.
//   * no_sync() / set_requires_gradient_sync(false): backward only sums the units' full gradients
//     locally, in reduce_dtype (more memory, as in PyTorch's FSDP); the next synchronized backward
//     reduce-scatters the sum.
//   * Mixed precision: param_dtype (e.g. bfloat16) is the dtype the units compute in (the shards
//     stay float32 and are cast before the gather); reduce_dtype the dtype gradients are
//     reduce-scattered in (e.g. float32 when computing in bfloat16).
//   * Activation checkpointing: each unit's forward runs without keeping its activations and is
//     recomputed in backward, under the forward's autocast state (detail/fsdp_checkpoint.h);
//     gradients equal the run without it. Needs a deterministic unit forward (no dropout).
//   * Refused with a ddp::Error naming the fix: a parameter in two units (tied weights: put both
//     users in one unit, or in the root unit), a unit that is not a submodule of the root, units
//     nested in each other, a unit called outside the root's forward, a wrapped module that is
//     wrapped again.
//   * Every rank must build the same model (checked at construction, naming the rank and the first
//     unit or parameter that differs from rank 0's); rank 0's weights and buffers reach the others
//     then, unit by unit.
//   * A model too large for one device: build it on the host (CPU) and wrap it with the device it
//     trains on (options.device, as FSDP's device_id): the wrapper shards it unit by unit, moves only
//     this rank's shards to the device and frees the host parameters as it goes (the device's peak:
//     about one unit over the shards). full_state_dict() gathers one unit at a time into rank 0's
//     CPU dict; load_full_state_dict() needs the dict on rank 0 only.
//   * The shards are a ShardedState (sharded_state.h): ShardedAdamW (also named FullyShardedAdamW)
//     steps on them, with a GradScaler for float16, and save_sharded_snapshot writes them in ZeRO's
//     crash-safe format (sharded_snapshot.h).
//   * The code: this file (the API), fully_sharded.cpp (construction, the units' order in forward and
//     backward), fully_sharded_state.cpp (state dicts, shards, memory), detail/fsdp_unit.* (one unit:
//     gather, reshard, reduce), detail/fsdp_checkpoint.* (activation checkpointing).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/detail/fsdp_unit.h"  // defines: FullyShardedUnit (a unit's layout)
#include "ddp/detail/torch_pickle.h"
#include "ddp/module_call.h"    // defines: ddp::call, the units' call site
#include "ddp/module_holder.h"  // defines: WrappedModule, HolderOf (a holder or an ...Impl)
#include "ddp/no_sync.h"        // defines: NoSync, GradientSyncSwitch
#include "ddp/process_group.h"
#include "ddp/sharded_adamw.h"     // defines: ShardedAdamW, FullyShardedAdamW
#include "ddp/sharded_snapshot.h"  // defines: save_sharded_snapshot, load_sharded_snapshot
#include "ddp/sharded_state.h"

namespace ddp {

struct FullyShardedOptions {
  bool reshard_after_forward = true;         // free a unit's gathered parameters after its forward
  bool checkpoint_activations = false;       // recompute each unit's forward in backward
  bool prefetch = true;                      // start the next unit's all-gather early
  std::optional<torch::Dtype> param_dtype;   // compute dtype of the units (default: the parameters')
  std::optional<torch::Dtype> reduce_dtype;  // reduce-scatter dtype (default: param_dtype's)
  bool broadcast_from_rank0 = true;          // at construction: every rank gets rank 0's weights
  // Where the shards live and the units compute (FSDP's device_id). The model may be on the host:
  // it is moved unit by unit, only this rank's shards. Default: the device its parameters are on.
  std::optional<torch::Device> device;
};

// The engine behind FullyShardedDataParallel (no template: compiled once).
class FullyShardedEngine : public ShardedState, public GradientSyncSwitch {
 public:
  FullyShardedEngine(std::shared_ptr<torch::nn::Module> root, std::vector<std::shared_ptr<torch::nn::Module>> units,
                     std::shared_ptr<ProcessGroup> pg, FullyShardedOptions options);
  ~FullyShardedEngine() override;
  FullyShardedEngine(const FullyShardedEngine&) = delete;
  FullyShardedEngine& operator=(const FullyShardedEngine&) = delete;

  const FullyShardedOptions& options() const { return options_; }
  ProcessGroup& process_group() override { return *pg_; }
  torch::nn::Module& module() override { return *root_; }
  const torch::Device& device() const { return device_; }

  // The root unit first, then the user's units in the order given.
  const std::vector<FullyShardedUnit>& units() const { return layouts_; }
  // The shards the optimizer steps on, one per unit (units()' order), each of shard_numel elements.
  const std::vector<torch::Tensor>& parameters() const { return shards_; }

  // Around the root's forward (FullyShardedDataParallel::forward calls them).
  void begin_root_forward();
  torch::Tensor end_root_forward(torch::Tensor output);  // output: hooked for backward
  void abandon_root_forward() noexcept;                  // an exception left the root's forward
  // LibTorch's error from reading an ungathered unit's parameters (the unit called as
  // unit->forward(x), not ddp::call(unit, x)) as a ddp::Error naming the fix; other errors: returns.
  void explain_forward_failure(const c10::Error& error) const;
  // A floating-point input in the compute dtype (param_dtype), others as they are.
  torch::Tensor cast_input(const torch::Tensor& input) const;

  // While false, backward accumulates full gradients locally (no_sync).
  void set_requires_gradient_sync(bool enabled) override { sync_ = enabled; }
  bool requires_gradient_sync() const override { return sync_; }
  // .grad of the shards to none (or zero); accumulated full gradients (no_sync) dropped.
  void zero_grad(bool set_to_none = true) { clear_gradients(set_to_none); }

  // The full state_dict (parameters in float32 under the root's names, then buffers), gathered
  // one unit at a time into rank 0's CPU dict (other ranks get an empty dict, and hold at most one
  // gathered unit meanwhile). A collective: all ranks call it.
  TensorDict full_state_dict();
  // Loads a full state_dict from rank 0 (the other ranks' `state` is not read: pass an empty one),
  // one unit at a time: each rank keeps its slices. Names and shapes must be the model's (a
  // ddp::Error naming the difference, on every rank). A collective.
  void load_full_state_dict(const TensorDict& state);

  // This rank's bytes right now: the shards and their gradients; the gathered parameters and the
  // full gradients that are allocated (between steps: none, unless reshard_after_forward is false
  // for the last forward, or no_sync accumulates).
  int64_t shard_bytes() const;
  int64_t gathered_bytes() const;
  int64_t full_gradient_bytes() const;
  // Units whose reduce-scatter input is allocated now, and the most at any moment since the
  // construction (1: the one in flight; FSDP2 keeps up to 2).
  int units_holding_reduce_input() const;
  int most_units_holding_reduce_input() const { return most_reduce_inputs_; }

  // ShardedState (sharded_state.h): the units are the groups; the shards float32.
  std::string sharded_engine() const override { return "FSDP"; }
  int zero_stage() const override { return 3; }
  std::vector<ShardedParameter> sharded_parameters() const override;
  std::vector<ShardedGroup> sharded_groups() const override;
  std::vector<torch::Tensor> parameter_shards() override;
  std::vector<torch::Tensor> gradient_shards() override;
  bool has_gradients() const override { return has_gradients_; }
  void clear_gradients(bool set_to_none) override;
  void parameter_shards_changed() override {}  // the next forward gathers them

 private:
  struct Plan;  // construction's: which parameter goes to which unit (fully_sharded.cpp)
  Plan plan_units(const std::vector<std::shared_ptr<torch::nn::Module>>& units) const;
  void check_same_model(const Plan& plan);
  void shard_units(Plan& plan);
  void install_hooks();

  void gather(size_t unit);
  void start_gather(size_t unit);
  void reshard(size_t unit);
  torch::Tensor unit_forward(size_t unit, const std::vector<torch::Tensor>& args, const ModuleForward& forward);
  void pre_backward(size_t unit);
  void post_backward(size_t unit);  // all of the unit's gradients are ready
  void finish_backward();
  void finish_reduce_in_flight();

  std::shared_ptr<torch::nn::Module> root_;
  std::shared_ptr<ProcessGroup> pg_;
  FullyShardedOptions options_;
  torch::Device device_ = torch::kCPU;
  detail::FsdpDtypes dtypes_;
  torch::Dtype param_dtype_ = torch::kFloat32;  // of the model's parameters as built
  std::vector<detail::FsdpUnit> units_;
  std::vector<FullyShardedUnit> layouts_;
  std::vector<torch::Tensor> shards_;
  bool sync_ = true;
  bool has_gradients_ = false;
  bool in_root_forward_ = false;
  bool backward_queued_ = false;
  std::optional<size_t> reducing_;  // the unit whose reduce-scatter is in flight
  int most_reduce_inputs_ = 0;
  std::vector<size_t> order_, last_order_;  // units' forward order: this pass, the previous one
};

// M as DistributedDataParallel's and ZeroDataParallel's: the module or its LibTorch holder
// (module_holder.h).
template <typename M>
class FullyShardedDataParallel {
  static_assert(check_module_type<M>());

 public:
  using Impl = WrappedModule<M>;

  // Collective. `units`: submodules of `root` (e.g. model->blocks[i].ptr()); may be empty (then
  // the whole model is one unit: ZeRO-3 without overlap).
  FullyShardedDataParallel(std::shared_ptr<Impl> root, std::vector<std::shared_ptr<torch::nn::Module>> units,
                           std::shared_ptr<ProcessGroup> pg, FullyShardedOptions options = {})
      : module_(std::move(root)),
        engine_(std::make_shared<FullyShardedEngine>(module_, std::move(units), std::move(pg), options)) {}
  template <HolderOf<Impl> H>
  FullyShardedDataParallel(const H& holder, std::vector<std::shared_ptr<torch::nn::Module>> units,
                           std::shared_ptr<ProcessGroup> pg, FullyShardedOptions options = {})
      : FullyShardedDataParallel(holder.ptr(), std::move(units), std::move(pg), options) {}

  // The root's forward with the units gathered around their ddp::call sites: model(x).
  template <typename... Args>
  auto forward(Args&&... args) -> decltype(std::declval<Impl&>().forward(std::forward<Args>(args)...)) {
    engine_->begin_root_forward();
    try {
      auto output = module_->forward(cast_input(std::forward<Args>(args))...);
      if constexpr (std::is_same_v<std::decay_t<decltype(output)>, torch::Tensor>) {
        return engine_->end_root_forward(std::move(output));
      } else {
        engine_->end_root_forward(torch::Tensor());
        return output;
      }
    } catch (const c10::Error& e) {
      engine_->abandon_root_forward();
      engine_->explain_forward_failure(e);  // a ddp::Error naming the fix when a unit was read ungathered
      throw;
    } catch (...) {
      engine_->abandon_root_forward();
      throw;
    }
  }
  template <typename... Args>
  auto operator()(Args&&... args) -> decltype(std::declval<Impl&>().forward(std::forward<Args>(args)...)) {
    return forward(std::forward<Args>(args)...);
  }
  // The plain module: train(), eval(), ... (model->forward(x) is the plain module's forward, which
  // gathers nothing: call model(x)).
  Impl* operator->() const { return module_.get(); }
  const std::shared_ptr<Impl>& module() const { return module_; }
  const std::shared_ptr<FullyShardedEngine>& engine() const { return engine_; }
  std::shared_ptr<ShardedState> sharded_state() const { return engine_; }  // what ShardedAdamW steps on

  // What the optimizer steps on: this rank's shards (one per unit).
  std::vector<torch::Tensor> parameters() const { return engine_->parameters(); }
  void zero_grad(bool set_to_none = true) { engine_->zero_grad(set_to_none); }
  TensorDict full_state_dict() { return engine_->full_state_dict(); }
  void load_full_state_dict(const TensorDict& state) { engine_->load_full_state_dict(state); }

  // Gradient accumulation, as the other wrappers: while off, backward() only accumulates locally (no
  // communication); the next backward with it on reduce-scatters the sum. FSDP2's name.
  void set_requires_gradient_sync(bool on) { engine_->set_requires_gradient_sync(on); }
  bool requires_gradient_sync() const { return engine_->requires_gradient_sync(); }
  // The same for a scope: while the guard lives, gradient sync is off (no_sync.h).
  using NoSync = ddp::NoSync;
  [[nodiscard]] NoSync no_sync() { return NoSync(*engine_); }

 private:
  template <typename T>
  decltype(auto) cast_input(T&& arg) {  // floating-point tensors to param_dtype, as fully_shard's policy
    if constexpr (std::is_same_v<std::decay_t<T>, torch::Tensor>) {
      return engine_->cast_input(arg);
    } else {
      return std::forward<T>(arg);
    }
  }

  std::shared_ptr<Impl> module_;
  std::shared_ptr<FullyShardedEngine> engine_;
};
// FullyShardedDataParallel(net, units, pg): <Net> for a holder, <NetImpl> for a shared_ptr.
template <ModuleHolderType H>
FullyShardedDataParallel(const H&, std::vector<std::shared_ptr<torch::nn::Module>>, std::shared_ptr<ProcessGroup>,
                         FullyShardedOptions = {}) -> FullyShardedDataParallel<H>;
template <typename T>
FullyShardedDataParallel(std::shared_ptr<T>, std::vector<std::shared_ptr<torch::nn::Module>>,
                         std::shared_ptr<ProcessGroup>, FullyShardedOptions = {}) -> FullyShardedDataParallel<T>;

// The snapshots of FSDP training are the sharded snapshots (sharded_snapshot.h): each rank's shards
// of the units and of Adam's moments and its RNG state, rank 0's manifest last (crash-safe), resumable
// on another number of ranks (mid-epoch: from the epoch's start). FSDP's own names for them.
inline void save_fully_sharded_snapshot(const std::string& path, FullyShardedAdamW& optimizer,
                                        const TrainingState& state, const std::optional<SnapshotOwner>& owner = {}) {
  save_sharded_snapshot(path, optimizer, state, owner);
}
inline std::optional<TrainingState> load_fully_sharded_snapshot(const std::string& path, FullyShardedAdamW& optimizer,
                                                                const std::optional<SnapshotOwner>& owner = {}) {
  return load_sharded_snapshot(path, optimizer, owner);
}

}  // namespace ddp
