// GradScaler as torch/amp/grad_scaler.py (torch 2.11) computes it, with the same ATen kernels.
#include "ddp/grad_scaler.h"

#include <algorithm>

#include "ddp/detail/optimizer_helpers.h"
#include "ddp/error.h"

namespace ddp {

bool SupportsAmpScaling::scaler_attached() const { return grad_scaler_ && grad_scaler_->is_enabled(); }

GradScaler::GradScaler(torch::Device device, GradScalerOptions options) : options_(options) {
  if (options_.enabled) {
    DDP_CHECK(options_.growth_factor > 1.0, "GradScaler's growth factor must be > 1.0", "e.g. 2.0 (PyTorch's)");
    DDP_CHECK(options_.backoff_factor < 1.0, "GradScaler's backoff factor must be < 1.0", "e.g. 0.5 (PyTorch's)");
    DDP_CHECK(options_.growth_interval >= 1, "GradScaler's growth interval must be at least 1", "e.g. 2000");
    DDP_CHECK(options_.init_scale > 0, "GradScaler's initial scale must be positive", "e.g. 65536 (2^16)");
    DDP_CHECK(options_.hysteresis >= 1, "GradScaler's hysteresis must be at least 1", "1 backs off at every overflow");
  }
  const auto on = torch::TensorOptions().device(device);
  scale_ = torch::full({}, options_.init_scale, on.dtype(torch::kFloat32));
  growth_tracker_ = torch::zeros({}, on.dtype(torch::kInt32));
  hysteresis_ = torch::full({}, options_.hysteresis, on.dtype(torch::kInt32));
}

torch::Tensor GradScaler::scale(const torch::Tensor& outputs) const {
  if (!options_.enabled) return outputs;
  return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

double GradScaler::get_scale() const { return scale_.item<double>(); }

GradScalerState GradScaler::state() const {
  return {scale_.item<double>(), growth_tracker_.item<int64_t>(), hysteresis_.item<int64_t>()};
}

void GradScaler::load_state(const GradScalerState& state) {
  torch::NoGradGuard no_grad;
  scale_.fill_(state.scale);
  growth_tracker_.fill_(state.growth_tracker);
  hysteresis_.fill_(state.hysteresis_left);
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", scale_.cpu());
  archive.write("growth_tracker", growth_tracker_.cpu());
  archive.write("hysteresis", hysteresis_.cpu());
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor scale, tracker, hysteresis;
  archive.read("scale", scale);
  archive.read("growth_tracker", tracker);
  torch::NoGradGuard no_grad;
  scale_.copy_(scale);
  growth_tracker_.copy_(tracker);
  if (archive.try_read("hysteresis", hysteresis)) hysteresis_.copy_(hysteresis);
}

GradScaler::PerOptimizer& GradScaler::state_of(const void* optimizer) {
  for (auto& s : per_optimizer_)
    if (s.optimizer == optimizer) return s;
  per_optimizer_.push_back({});
  per_optimizer_.back().optimizer = optimizer;
  return per_optimizer_.back();
}

void GradScaler::check_can_unscale(const PerOptimizer& s) const {
  DDP_CHECK(s.stage != Stage::kUnscaled,
            "GradScaler::unscale_() has already been called on this optimizer since "
            "the last update()",
            "unscale once per step (an attached scaler unscales in clip_grad_norm() or step() by itself)");
  DDP_CHECK(s.stage != Stage::kStepped, "GradScaler::unscale_() is being called after step()",
            "call unscale_() before step(), and update() after it");
}

torch::Tensor GradScaler::unscale_gradients(const std::vector<torch::Tensor>& grads) const {
  torch::NoGradGuard no_grad;
  DDP_CHECK(!grads.empty(), "GradScaler has no gradients to unscale", "call backward() on the scaled loss first");
  // Python: FP32 division can be imprecise for certain compile options, so the reciprocal is taken in FP64.
  const auto inv_scale = scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
  const torch::Device home = grads[0].device();
  auto found_inf = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(home));
  // One multi-tensor kernel per device and dtype (Python splits them the same way).
  for (const auto& indices : optim_detail::group_by_device_and_dtype(grads)) {
    const auto group = optim_detail::pick(grads, indices);
    const torch::Device device = group[0].device();
    auto found_here = device == home ? found_inf : torch::zeros({}, found_inf.options().device(device));
    at::_amp_foreach_non_finite_check_and_unscale_(group, found_here, inv_scale.to(device, /*non_blocking=*/true));
    if (device != home) found_inf = torch::maximum(found_inf, found_here.to(home, /*non_blocking=*/true));
  }
  return found_inf;
}

GradScaler::Target GradScaler::target_of(torch::optim::Optimizer& optimizer) {
  Target t;
  t.key = &optimizer;
  t.gradients = [&optimizer] {
    std::vector<torch::Tensor> grads;
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        DDP_CHECK(p.grad().scalar_type() != torch::kHalf, "GradScaler: attempting to unscale float16 gradients",
                  "keep the parameters in float32 and run the forward under ddp::Autocast (mixed precision)");
        DDP_CHECK(!p.grad().is_sparse(), "GradScaler unscales dense gradients only", "use dense gradients");
        grads.push_back(p.grad());
      }
    return grads;
  };
  t.amp = dynamic_cast<SupportsAmpScaling*>(&optimizer);
  t.plain_step = [&optimizer] { optimizer.step(); };
  return t;
}

GradScaler::Target GradScaler::target_of(ShardedAmpScaling& optimizer) {
  Target t;
  t.key = &optimizer;
  t.gradients = [&optimizer] { return optimizer.gradient_slices(); };
  t.amp = &optimizer;
  t.sharded = &optimizer;
  t.plain_step = [&optimizer] { optimizer.step(); };
  return t;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) { unscale_target(target_of(optimizer)); }
void GradScaler::unscale_(ShardedAmpScaling& optimizer) { unscale_target(target_of(optimizer)); }
void GradScaler::step(torch::optim::Optimizer& optimizer) { step_target(target_of(optimizer)); }
void GradScaler::step(ShardedAmpScaling& optimizer) { step_target(target_of(optimizer)); }

void GradScaler::unscale_target(const Target& target) {
  if (!options_.enabled) return;
  auto& s = state_of(target.key);
  check_can_unscale(s);
  const auto grads = target.gradients();
  // No gradient at all: nothing can be inf (PyTorch records an empty map and then refuses to step).
  s.found_inf = grads.empty() ? torch::zeros({}, scale_.options()) : unscale_gradients(grads);
  s.stage = Stage::kUnscaled;
  // Each rank saw only its slice: inf/NaN on any rank skips the step on all (max over the ranks).
  if (target.sharded) s.wait_for_ranks = target.sharded->combine_found_inf(s.found_inf);
}

void GradScaler::finish_ranks(PerOptimizer& s) {
  if (!s.wait_for_ranks) return;
  auto wait = std::move(s.wait_for_ranks);
  s.wait_for_ranks = nullptr;
  wait();
}

void GradScaler::step_target(const Target& target) {
  // Disabled: the optimizer's own step (an attached scaler that is disabled does not come back here).
  if (!options_.enabled) {
    target.plain_step();
    return;
  }
  auto& s = state_of(target.key);
  DDP_CHECK(s.stage != Stage::kStepped, "GradScaler::step() has already been called since the last update()",
            "call update() at the end of every step");
  if (s.stage == Stage::kReady) unscale_target(target);
  finish_ranks(s);
  if (target.amp)
    target.amp->step_unless_found_inf(s.found_inf);
  else if (s.found_inf.item<float>() == 0)  // PyTorch's _maybe_opt_step: a host read
    target.plain_step();
  s.stage = Stage::kStepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  DDP_CHECK(!per_optimizer_.empty(), "GradScaler::update() without an unscale_() or step() since the last update()",
            "call step(optimizer) before update() (PyTorch: no inf checks were recorded prior to update)");
  torch::NoGradGuard no_grad;
  torch::Tensor found_inf;
  for (auto& s : per_optimizer_) {
    finish_ranks(s);
    const auto mine = s.found_inf.to(scale_.device(), /*non_blocking=*/true);
    found_inf = found_inf.defined() ? found_inf + mine : mine;  // Python sums them too
  }
  if (options_.dynamic && options_.hysteresis == 1)
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor, options_.backoff_factor,
                           options_.growth_interval);
  else if (options_.dynamic)
    update_with_hysteresis(found_inf);
  if (options_.dynamic && options_.min_scale > 0) scale_.clamp_min_(options_.min_scale);
  per_optimizer_.clear();
}

// _amp_update_scale_'s rule with DeepSpeed's delayed backoff, in tensor operations on the device:
// an overflow zeroes the growth count and, once hysteresis_ reaches 1, backs the scale off, else
// counts hysteresis_ down; growth_interval clean steps in a row grow the scale and refill it.
void GradScaler::update_with_hysteresis(const torch::Tensor& found_inf) {
  const auto found = found_inf.gt(0);
  const auto back_off = found.logical_and(hysteresis_.le(1));
  const auto counted = torch::where(found, torch::zeros_like(growth_tracker_), growth_tracker_ + 1);
  const auto grow = counted.eq(options_.growth_interval);
  const auto grown = scale_ * options_.growth_factor;
  const auto keep_grown = grow.logical_and(grown.isfinite());  // as _amp_update_scale_: never grow to inf
  const auto new_scale =
      torch::where(back_off, scale_ * options_.backoff_factor, torch::where(keep_grown, grown, scale_));
  scale_.copy_(new_scale);
  growth_tracker_.copy_(torch::where(grow, torch::zeros_like(counted), counted));
  const auto refill = torch::full_like(hysteresis_, options_.hysteresis);
  hysteresis_.copy_(torch::where(found.logical_and(back_off.logical_not()), hysteresis_ - 1,
                                 torch::where(grow, refill, hysteresis_)));
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  for (auto& s : per_optimizer_) finish_ranks(s);
  torch::NoGradGuard no_grad;
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

}  // namespace ddp
