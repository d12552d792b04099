// defines: GradScaler — PyTorch's torch.amp.GradScaler (dynamic loss scaling for float16 mixed
//          precision) for C++, with its semantics and defaults (torch/amp/grad_scaler.py, torch 2.11):
//          scale() multiplies the loss (or its gradient) by the scale, 2^16 at first; unscale_()
//          divides an optimizer's gradients by it and notes in found_inf whether any is inf or NaN,
//          with the multi-tensor kernel PyTorch uses (_amp_foreach_non_finite_check_and_unscale_,
//          one call per device and dtype); step() skips the optimizer's step when found_inf is set;
//          update() backs the scale off (x0.5) after such a step and grows it (x2) after
//          growth_interval (2000) steps in a row without one (_amp_update_scale_).
//          GradScalerOptions, GradScalerState, SupportsAmpScaling.
//
//   ddp::GradScaler scaler(device);                 // GradScaler("cuda")
//   {
//     ddp::Autocast amp({.device_type = device.type(), .dtype = torch::kHalf});
//     loss = loss_fn(model(x), y);  // model: the DistributedDataParallel wrapper
//   }
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);                     // only to clip or read the true gradients
//   scaler.step(optimizer);
//   scaler.update();
//
// No host synchronization per step: found_inf and the scale stay on the device. PyTorch's step()
// reads found_inf on the host (found_inf.item()) unless the optimizer takes it itself (fused Adam,
// AdamW, SGD: _step_supports_amp_scaling). Here the library's optimizers (ddp::Sgd, ddp::Adadelta,
// ddp::ShardedAdamW; adam_step takes it too) take it: they skip on the device, leaving parameters
// and state unchanged. Any other torch::optim::Optimizer falls back to PyTorch's host check
// (one synchronization per step on a GPU).
//
// Across ranks a step with inf/NaN on any rank is skipped on every rank. With DistributedDataParallel
// that needs nothing: the averaged gradients carry an inf into every rank's gradients. With ZeRO
// each rank unscales only its own slice of the gradients, so unscale_ of a sharded optimizer
// (ShardedAmpScaling: ShardedAdamW) has it start an allreduce (MAX) of found_inf that step() waits
// for as DDP waits for its buckets (on NCCL a stream wait, not a host wait).
//
// Attached (DeepSpeed's way, where the optimizer owns the loss scaler): after
// optimizer.set_grad_scaler(scaler), optimizer.step() is scaler.step(optimizer) + scaler.update(),
// ShardedAdamW::clip_grad_norm() unscales first, and the optimizer's snapshots hold the scaler's
// state (scale, growth tracker), so a resumed run continues with the same scale.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace ddp {

class GradScaler;

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, as PyTorch
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // < 1
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() returns its input, step() is the optimizer's step, the rest do nothing
  // Not in PyTorch's GradScaler; DeepSpeed's loss scaler has them. Their defaults are PyTorch's behaviour.
  bool dynamic = true;  // false: the scale stays init_scale (DeepSpeed's static "loss_scale"); inf/NaN steps still skip
  double min_scale = 0;    // the scale never backs off below this (DeepSpeed's min_loss_scale); 0: no floor
  int64_t hysteresis = 1;  // DeepSpeed's: the scale backs off at the hysteresis-th overflow since it last grew
                           // (each overflow still skips its step and restarts the growth count); 1: at every one
};

// What a snapshot keeps (PyTorch's state_dict: "scale", "_growth_tracker").
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;   // steps in a row without inf/NaN since the scale last changed
  int64_t hysteresis_left = 1;  // overflows still tolerated before a backoff (options.hysteresis after a growth)
};

// An optimizer that takes GradScaler's found_inf itself (PyTorch's _step_supports_amp_scaling) and
// that a scaler can be attached to (see the header comment).
class SupportsAmpScaling {
 public:
  virtual ~SupportsAmpScaling() = default;
  // One step, except that nothing (parameters, optimizer state) changes when found_inf, a 0-dim
  // float32 tensor on the device, is nonzero. Never reads found_inf on the host.
  virtual void step_unless_found_inf(const torch::Tensor& found_inf) = 0;

  void set_grad_scaler(std::shared_ptr<GradScaler> scaler) { grad_scaler_ = std::move(scaler); }
  const std::shared_ptr<GradScaler>& grad_scaler() const { return grad_scaler_; }

 protected:
  bool scaler_attached() const;  // attached and enabled
  std::shared_ptr<GradScaler> grad_scaler_;
};

// An optimizer whose gradients are sharded over the ranks (ZeRO's ShardedAdamW): each rank
// unscales only its slices, and the ranks combine found_inf so that all of them skip the same
// steps. GradScaler's unscale_ and step take it as they take a torch::optim::Optimizer.
class ShardedAmpScaling : public SupportsAmpScaling {
 public:
  // The step without a scaler (GradScaler's step when the scaler is disabled).
  virtual void step() = 0;
  // This rank's gradient slices, the ones to unscale; a ddp::Error when there are none to unscale
  // (no synchronized backward pass since zero_grad()).
  virtual std::vector<torch::Tensor> gradient_slices() = 0;
  // Starts combining `found_inf` (this rank's, 0-dim float32 on the device) in place over the
  // ranks (their maximum); returns what waits for that, or an empty function when nothing is in
  // flight (one rank).
  virtual std::function<void()> combine_found_inf(torch::Tensor& found_inf) = 0;
};

class GradScaler {
 public:
  // `device`: where the scale lives (PyTorch's device="cuda"/"cpu"): the device of the gradients.
  // Bad factors are a ddp::Error (PyTorch: AssertionError).
  explicit GradScaler(torch::Device device = torch::kCPU, GradScalerOptions options = {});

  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // outputs x scale (on outputs' device); outputs itself when disabled.
  torch::Tensor scale(const torch::Tensor& outputs) const;
  // The scale as a 0-dim float32 tensor on the device (no host read).
  const torch::Tensor& scale_tensor() const { return scale_; }
  // The scale and the growth tracker as numbers: read on the host (a synchronization on a GPU).
  double get_scale() const;
  GradScalerState state() const;
  void load_state(const GradScalerState& state);
  void save(torch::serialize::OutputArchive& archive) const;  // keys "scale", "growth_tracker", "hysteresis"
  void load(torch::serialize::InputArchive& archive);

  // Divides the gradients by the scale and records found_inf for `optimizer`. Once per step, before
  // step(); a second call before update() is an error (as PyTorch). Float16 gradients are refused
  // (PyTorch: "Attempting to unscale FP16 gradients"): keep the parameters in float32.
  void unscale_(torch::optim::Optimizer& optimizer);
  // ZeRO: this rank's gradient slices; starts the allreduce (MAX) of found_inf over the ranks.
  void unscale_(ShardedAmpScaling& optimizer);

  // unscale_ unless done, then the optimizer's step unless found_inf (see the header comment).
  void step(torch::optim::Optimizer& optimizer);
  void step(ShardedAmpScaling& optimizer);

  // The new scale from every optimizer's found_inf since the last update (_amp_update_scale_).
  void update();
  void update(double new_scale);  // sets it instead (PyTorch's update(new_scale))

  // Divides `grads` by the scale in place; returns found_inf (0-dim float32 on `grads`' device).
  torch::Tensor unscale_gradients(const std::vector<torch::Tensor>& grads) const;

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    const void* optimizer = nullptr;
    Stage stage = Stage::kReady;
    torch::Tensor found_inf;
    std::function<void()> wait_for_ranks;  // ZeRO: the allreduce of found_inf in flight
  };
  // One optimizer as unscale_ and step see it, whichever kind: both overloads go through it.
  struct Target {
    const void* key = nullptr;
    std::function<std::vector<torch::Tensor>()> gradients;  // the gradients (slices) to unscale
    SupportsAmpScaling* amp = nullptr;                      // skips on the device; else a host check
    ShardedAmpScaling* sharded = nullptr;                   // combines found_inf over the ranks
    std::function<void()> plain_step;
  };
  static Target target_of(torch::optim::Optimizer& optimizer);
  static Target target_of(ShardedAmpScaling& optimizer);
  void unscale_target(const Target& target);
  void step_target(const Target& target);
  PerOptimizer& state_of(const void* optimizer);
  void finish_ranks(PerOptimizer& s);
  void check_can_unscale(const PerOptimizer& s) const;
  void update_with_hysteresis(const torch::Tensor& found_inf);

  GradScalerOptions options_;
  torch::Tensor scale_;           // 0-dim float32
  torch::Tensor growth_tracker_;  // 0-dim int32
  torch::Tensor hysteresis_;      // 0-dim int32: overflows still tolerated (options_.hysteresis > 1 only)
  std::vector<PerOptimizer> per_optimizer_;
};

}  // namespace ddp
