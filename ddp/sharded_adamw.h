// defines: ShardedAdamW (also FullyShardedAdamW) — the sharded optimizer of ZeRO and FSDP: Adam/AdamW
//          (ddp::adam_step, multi-tensor) on this rank's slice of every flat group of a sharded engine
//          (sharded_state.h: ZeroDataParallel's buckets, FullyShardedDataParallel's units). Each rank
//          keeps only its 1/N of the moments (exp_avg, exp_avg_sq) and updates only its slice of the
//          parameters; then ZeRO all-gathers the slices so every rank holds the whole model again
//          (FSDP gathers them at its next forward). Gradient clipping takes the norm of all gradients
//          together, summed over all ranks' slices, as DeepSpeed's gradient_clipping and FSDP's.
//
//   ddp::ZeroDataParallel<Net> model(net, pg, {.stage = 2});      // or FullyShardedDataParallel
//   ddp::ShardedAdamW optimizer(model, ddp::AdamOptions{.lr = 1e-3});
//   optimizer.zero_grad();
//   loss_fn(model(x), y).backward();            // stage 2: buckets reduce-scattered during backward
//   optimizer.clip_grad_norm(1.0);
//   optimizer.step();                             // my slice, then the all-gather
//
// Mixed precision: with a GradScaler attached (set_grad_scaler, grad_scaler.h), clip_grad_norm()
// first unscales this rank's gradient slices and step() skips on inf/NaN found on any rank (the
// ranks' found_inf combined by an allreduce), then updates the scale; the snapshots keep its state.
// The parameters and Adam's moments stay float32. Built from a wrapper whose module M has a member
// grad_scaler() (a std::shared_ptr<GradScaler>), the optimizer attaches that scaler: the model that
// scales its loss and the optimizer that unscales then share one.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/grad_scaler.h"
#include "ddp/multi_tensor_adam.h"
#include "ddp/sharded_state.h"  // defines: ShardedState (the engine's shards)

namespace ddp {

class ShardedAdamW : public ShardedAmpScaling {
 public:
  ShardedAdamW(std::shared_ptr<ShardedState> state, AdamOptions options);
  // A wrapper: ZeroDataParallel or FullyShardedDataParallel.
  template <typename W>
  requires requires(W& w) { w.sharded_state(); }
  ShardedAdamW(W& model, AdamOptions options) : ShardedAdamW(model.sharded_state(), options) {
    if constexpr (requires { model.module()->grad_scaler(); }) set_grad_scaler(model.module()->grad_scaler());
  }

  // Gradients to none (or zero), as torch::optim::Optimizer::zero_grad.
  void zero_grad(bool set_to_none = true);
  // The L2 norm of all gradients (every rank's slice), the same on every rank; if it exceeds
  // max_norm, every gradient slice is scaled by max_norm / (norm + 1e-6), as
  // torch.nn.utils.clip_grad_norm_. max_norm <= 0: only measures. A collective: all ranks call it.
  // With a scaler attached: of the unscaled gradients (inf when the step is to be skipped).
  double clip_grad_norm(double max_norm);
  // One Adam/AdamW step on this rank's slices, then the all-gather of the parameters. Needs a
  // synchronized backward since zero_grad(). A collective: all ranks call it. With a scaler
  // attached: scaler.step(*this) and scaler.update().
  void step() override;
  // The step GradScaler calls: PyTorch's fused AdamW on this rank's slices, which changes nothing
  // when found_inf is set (every rank has the same found_inf: GradScaler combined it), then the
  // all-gather. Its step count for bias correction is a device tensor (applied_steps).
  void step_unless_found_inf(const torch::Tensor& found_inf) override;
  // What GradScaler's unscale_ asks (ShardedAmpScaling): this rank's gradient slices, and the
  // allreduce (MAX) of found_inf over the ranks.
  std::vector<torch::Tensor> gradient_slices() override;
  std::function<void()> combine_found_inf(torch::Tensor& found_inf) override;

  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }  // what a learning-rate schedule calls before step()
  const AdamOptions& options() const { return options_; }
  // Calls of step() (a learning-rate schedule counts them, skipped ones too: a scheduler steps
  // regardless in PyTorch). Adam's bias correction counts only the steps applied (below).
  int64_t steps_taken() const { return steps_; }
  // Steps applied (not skipped for inf/NaN) as a 0-dim float32 tensor on the device: equal to
  // steps_taken() without a scaler. Read it on the host only when needed (a snapshot).
  const torch::Tensor& applied_steps() const { return applied_; }

  // This rank's optimizer state in bytes, measured from the tensors (the moments' slices).
  int64_t state_bytes() const;

  // For sharded snapshots: the moments' slices (one per bucket) and the step count.
  std::vector<torch::Tensor>& exp_avg_shards() { return exp_avg_; }
  std::vector<torch::Tensor>& exp_avg_sq_shards() { return exp_avg_sq_; }
  void set_steps_taken(int64_t steps, std::optional<int64_t> applied = std::nullopt);
  ShardedState& state() { return *state_; }

 private:
  std::vector<size_t> stepping();  // the groups with a gradient this step

  std::shared_ptr<ShardedState> state_;
  AdamOptions options_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  int64_t steps_ = 0;
  torch::Tensor applied_;  // 0-dim float32 on the device: steps applied
};

// FSDP's name for it (the same optimizer: FullyShardedDataParallel is a ShardedState too).
using FullyShardedAdamW = ShardedAdamW;

}  // namespace ddp
