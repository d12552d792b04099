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
//     parameters are freed. With prefetch, the next unit's all-gather is started early (forward:
//     in the order of the previous pass; backward: the unit before it).
//   * The optimizer steps on parameters(): the shards (float32 leaves whose .grad is this rank's
//     averaged gradient slice). Any optimizer over tensors works (ddp::FullyShardedAdamW below keeps
//     Adam's moments for the shards and can be snapshotted; torch::optim::AdamW works too). The next
//     forward gathers the updated shards: there is no step-time all-gather.
//   * no_sync(): backward only accumulates the units' full gradients locally (more memory, as in
//     PyTorch's FSDP); the next synchronized backward reduce-scatters the sum.
//   * Mixed precision: param_dtype (e.g. bfloat16) is the dtype the units compute in (the shards
//     stay float32 and are cast before the gather); reduce_dtype the dtype gradients are
//     reduce-scattered in (e.g. float32 when computing in bfloat16).
//   * Activation checkpointing: each unit's forward runs without keeping its activations and is
//     recomputed in backward (a custom autograd function around the unit call); gradients equal
//     the run without it. Needs a deterministic unit forward (no dropout).
//   * Refused with a ddp::Error naming the fix: a parameter in two units (tied weights: put both
//     users in one unit, or in the root unit), a unit that is not a submodule of the root, units
//     nested in each other, a unit called outside the root's forward, a wrapped module that is
//     wrapped again.
//   * Every rank must build the same model (checked at construction: names and shapes against rank
//     0's); rank 0's weights and buffers are broadcast then, as DDP's (engine_core.h). Move the
//     model to its device before wrapping it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/detail/torch_pickle.h"
#include "ddp/module_call.h"  // defines: ddp::call, the units' call site
#include "ddp/multi_tensor_adam.h"
#include "ddp/process_group.h"
#include "ddp/snapshot.h"  // TrainingState, SnapshotOwner

namespace ddp {

struct FullyShardedOptions {
  bool reshard_after_forward = true;         // free a unit's gathered parameters after its forward
  bool checkpoint_activations = false;       // recompute each unit's forward in backward
  bool prefetch = true;                      // start the next unit's all-gather early
  std::optional<torch::Dtype> param_dtype;   // compute dtype of the units (default: the parameters')
  std::optional<torch::Dtype> reduce_dtype;  // reduce-scatter dtype (default: param_dtype's)
  bool broadcast_from_rank0 = true;          // at construction: every rank gets rank 0's weights
};

// One unit's layout (the same on every rank).
struct FullyShardedUnit {
  std::string name;                      // the unit's path in the root ("blocks.0"), "" for the root unit
  std::vector<std::string> param_names;  // full names in the root ("blocks.0.fc.weight"), in flat order
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0;         // parameters in the unit
  int64_t padded_numel = 0;  // numel rounded up to a multiple of the world size
  int64_t shard_numel = 0;   // padded_numel / world size
};

// The engine behind FullyShardedDataParallel (no template: compiled once).
class FullyShardedEngine {
 public:
  FullyShardedEngine(std::shared_ptr<torch::nn::Module> root, std::vector<std::shared_ptr<torch::nn::Module>> units,
                     std::shared_ptr<ProcessGroup> pg, FullyShardedOptions options);
  ~FullyShardedEngine();
  FullyShardedEngine(const FullyShardedEngine&) = delete;
  FullyShardedEngine& operator=(const FullyShardedEngine&) = delete;

  const FullyShardedOptions& options() const { return options_; }
  ProcessGroup& process_group() { return *pg_; }
  torch::nn::Module& module() { return *root_; }

  // The root unit first, then the user's units in the order given.
  const std::vector<FullyShardedUnit>& units() const;
  // The shards the optimizer steps on, one per unit (units()' order), each of shard_numel elements.
  const std::vector<torch::Tensor>& parameters() const;

  // Around the root's forward (FullyShardedDataParallel::forward calls them).
  void begin_root_forward();
  torch::Tensor end_root_forward(torch::Tensor output);  // output: hooked for backward
  void abandon_root_forward() noexcept;                  // an exception left the root's forward
  // A floating-point input in the compute dtype (param_dtype), others as they are.
  torch::Tensor cast_input(const torch::Tensor& input) const;

  // no_sync(): while false, backward accumulates full gradients locally.
  void set_gradient_sync(bool enabled) { sync_ = enabled; }
  bool gradient_sync() const { return sync_; }
  // .grad of the shards to none (or zero); accumulated full gradients (no_sync) dropped.
  void zero_grad(bool set_to_none = true);

  // The full state_dict (parameters in float32 under the root's names, then buffers), gathered
  // on rank 0 (other ranks get an empty dict). A collective: all ranks call it.
  TensorDict full_state_dict();
  // Loads a full state_dict (every rank passes the same one, e.g. read from one file): each rank
  // keeps its slices. Names and shapes must be the model's (ddp::Error naming the difference).
  void load_full_state_dict(const TensorDict& state);

  // This rank's bytes right now: the shards, their gradients, and the gathered parameters and full
  // gradients that are allocated (between steps: none, unless reshard_after_forward is false for
  // the last forward, or no_sync accumulates).
  int64_t shard_bytes() const;
  int64_t gathered_bytes() const;
  int64_t full_gradient_bytes() const;

  struct Impl;  // the engine's state (fully_sharded.cpp)

 private:
  void start_gather(size_t unit);  // the all-gather, asynchronous
  void gather(size_t unit);        // ... and waited for
  void reshard(size_t unit);       // the gathered parameters' memory freed
  torch::Tensor unit_forward(size_t unit, const std::vector<torch::Tensor>& args, const ModuleForward& forward);
  void pre_backward(size_t unit);
  void post_backward(size_t unit);  // all of the unit's gradients are ready
  void finish_backward();
  std::vector<torch::Tensor> gather_full_float(size_t unit);

  std::shared_ptr<torch::nn::Module> root_;
  std::shared_ptr<ProcessGroup> pg_;
  FullyShardedOptions options_;
  bool sync_ = true;
  std::unique_ptr<Impl> impl_;
};

template <typename M>
class FullyShardedDataParallel {
 public:
  // Collective. `units`: submodules of `root` (e.g. model->blocks[i].ptr()); may be empty (then
  // the whole model is one unit: ZeRO-3 without overlap).
  FullyShardedDataParallel(std::shared_ptr<M> root, std::vector<std::shared_ptr<torch::nn::Module>> units,
                           std::shared_ptr<ProcessGroup> pg, FullyShardedOptions options = {})
      : module_(std::move(root)),
        engine_(std::make_shared<FullyShardedEngine>(module_, std::move(units), std::move(pg), options)) {}

  // The root's forward with the units gathered around their ddp::call sites.
  template <typename... Args>
  auto forward(Args&&... args) -> decltype(std::declval<M&>().forward(std::forward<Args>(args)...)) {
    engine_->begin_root_forward();
    try {
      auto output = module_->forward(cast_input(std::forward<Args>(args))...);
      if constexpr (std::is_same_v<std::decay_t<decltype(output)>, torch::Tensor>) {
        return engine_->end_root_forward(std::move(output));
      } else {
        engine_->end_root_forward(torch::Tensor());
        return output;
      }
    } catch (...) {
      engine_->abandon_root_forward();
      throw;
    }
  }
  template <typename... Args>
  auto operator()(Args&&... args) -> decltype(std::declval<M&>().forward(std::forward<Args>(args)...)) {
    return forward(std::forward<Args>(args)...);
  }
  M* operator->() const { return module_.get(); }  // the plain module: train(), eval(), ...
  const std::shared_ptr<M>& module() const { return module_; }
  const std::shared_ptr<FullyShardedEngine>& engine() const { return engine_; }

  // What the optimizer steps on: this rank's shards (one per unit).
  std::vector<torch::Tensor> parameters() const { return engine_->parameters(); }
  void zero_grad(bool set_to_none = true) { engine_->zero_grad(set_to_none); }
  TensorDict full_state_dict() { return engine_->full_state_dict(); }
  void load_full_state_dict(const TensorDict& state) { engine_->load_full_state_dict(state); }

  // While a NoSync lives, backward() only accumulates locally (no communication).
  class NoSync {
   public:
    explicit NoSync(FullyShardedEngine& e) : e_(e), before_(e.gradient_sync()) { e_.set_gradient_sync(false); }
    ~NoSync() { e_.set_gradient_sync(before_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    FullyShardedEngine& e_;
    bool before_;
  };
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

  std::shared_ptr<M> module_;
  std::shared_ptr<FullyShardedEngine> engine_;
};

// Adam/AdamW (ddp::adam_step) on the shards of a FullyShardedDataParallel model: the moments are
// kept for the shards only (1/N). Gradient clipping takes the norm over all ranks' shards.
class FullyShardedAdamW {
 public:
  FullyShardedAdamW(std::shared_ptr<FullyShardedEngine> engine, AdamOptions options);
  template <typename M>
  FullyShardedAdamW(FullyShardedDataParallel<M>& model, AdamOptions options)
      : FullyShardedAdamW(model.engine(), options) {}

  void zero_grad(bool set_to_none = true) { engine_->zero_grad(set_to_none); }
  // The L2 norm of all gradients (all ranks); scales them by max_norm / (norm + 1e-6) if above
  // max_norm (max_norm <= 0: only measures). A collective.
  double clip_grad_norm(double max_norm);
  void step();  // needs a synchronized backward since zero_grad()

  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  int64_t state_bytes() const;  // this rank's moments
  std::vector<torch::Tensor>& exp_avg_shards() { return exp_avg_; }
  std::vector<torch::Tensor>& exp_avg_sq_shards() { return exp_avg_sq_; }
  FullyShardedEngine& engine() { return *engine_; }

 private:
  std::shared_ptr<FullyShardedEngine> engine_;
  AdamOptions options_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  int64_t steps_ = 0;
};

// A sharded snapshot of FSDP training: each rank writes its shards of the parameters and of Adam's
// moments (`path`.rank<r>-of-<N>), rank 0 the manifest at `path` (the layout, the training state and
// the step count). Loading with the same world size reads a rank's own shard; with another world
// size every rank reassembles the units from all shards and takes its new slices. Collective.
void save_fully_sharded_snapshot(const std::string& path, FullyShardedAdamW& optimizer, const TrainingState& state,
                                 const std::optional<SnapshotOwner>& owner = {});
// nullopt when `path` does not exist. Collective.
std::optional<TrainingState> load_fully_sharded_snapshot(const std::string& path, FullyShardedAdamW& optimizer,
                                                         const std::optional<SnapshotOwner>& owner = {});

}  // namespace ddp
