// Adadelta (Zeiler 2012) exactly as torch.optim.Adadelta computes it (its single-tensor path on
// the CPU, its multi-tensor path on GPUs), so a C++ run follows the Python seed's numbers. State is
// created at a parameter's first gradient.
#include "ddp/adadelta.h"

#include <torch/optim/serialize.h>

#include "ddp/detail/optimizer_helpers.h"
#include "ddp/error.h"

namespace ddp {

AdadeltaOptions::AdadeltaOptions(double lr) : lr_(lr) {}

void AdadeltaOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(rho);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
}

void AdadeltaOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, rho);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
}

void AdadeltaParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(square_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(acc_delta);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
}

void AdadeltaParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, square_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, acc_delta);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
}

Adadelta::Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions options)
    : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))}, std::make_unique<AdadeltaOptions>(options)) {
  // The same checks (and limits) as torch.optim.Adadelta's constructor.
  DDP_CHECK(options.lr() >= 0, "Adadelta: invalid learning rate " + c10::str(options.lr()),
            "the learning rate must be >= 0 (torch.optim.Adadelta's default: 1.0)");
  DDP_CHECK(options.rho() >= 0 && options.rho() <= 1, "Adadelta: invalid rho " + c10::str(options.rho()),
            "rho must be in [0, 1] (default: 0.9)");
  DDP_CHECK(options.eps() >= 0, "Adadelta: invalid eps " + c10::str(options.eps()), "eps must be >= 0 (default: 1e-6)");
  DDP_CHECK(options.weight_decay() >= 0, "Adadelta: invalid weight_decay " + c10::str(options.weight_decay()),
            "weight_decay must be >= 0 (default: 0)");
}

Adadelta::Adadelta(std::vector<torch::Tensor> params, double lr, double rho, double eps, double weight_decay)
    : Adadelta(std::move(params), AdadeltaOptions(lr).rho(rho).eps(eps).weight_decay(weight_decay)) {}

AdadeltaParamState& Adadelta::state_for(const torch::Tensor& param) {
  auto& slot = state_[optim_detail::state_key(state_, param)];
  if (!slot) {
    auto fresh = std::make_unique<AdadeltaParamState>();
    fresh->square_avg(torch::zeros_like(param, at::MemoryFormat::Preserve));
    fresh->acc_delta(torch::zeros_like(param, at::MemoryFormat::Preserve));
    slot = std::move(fresh);
  }
  auto& state = static_cast<AdadeltaParamState&>(*slot);
  // A loaded snapshot may hold its state on another device than the parameters now use.
  if (state.square_avg().device() != param.device()) {
    state.square_avg(state.square_avg().to(param.device()));
    state.acc_delta(state.acc_delta().to(param.device()));
  }
  state.step(state.step() + 1);
  return state;
}

torch::Tensor Adadelta::step(LossClosure closure) {
  if (scaler_attached()) {
    DDP_CHECK(closure == nullptr, "Adadelta::step(closure) with a GradScaler attached",
              "call step() without a closure (the scaler needs the gradients of one backward)");
    grad_scaler_->step(*this);  // comes back as step_unless_found_inf
    grad_scaler_->update();
    return {};
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (capturable_) update_device_lr();
  for (size_t group_index = 0; group_index < param_groups_.size(); ++group_index) {
    auto& group = param_groups_[group_index];
    const auto& options = static_cast<const AdadeltaOptions&>(group.options());
    const double lr = options.lr(), rho = options.rho(), eps = options.eps(), weight_decay = options.weight_decay();
    const torch::Tensor neg_lr =
        capturable_ ? device_lr_.negated(group_index) : torch::Tensor();  // else lr on the host
    // The parameters with a gradient, their gradients and states (created at the first gradient).
    std::vector<torch::Tensor> params, grads, square_avgs, acc_deltas;
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      DDP_CHECK(!param.grad().is_sparse(), "Adadelta does not support sparse gradients", "use dense gradients");
      auto& state = state_for(param);
      params.push_back(param);
      grads.push_back(param.grad());
      square_avgs.push_back(state.square_avg());
      acc_deltas.push_back(state.acc_delta());
    }
    if (params.empty()) continue;

    if (!optim_detail::use_foreach(foreach_, params)) {
      for (size_t i = 0; i < params.size(); ++i) {
        auto grad = grads[i];
        if (weight_decay != 0) grad = grad.add(params[i], weight_decay);
        auto& square_avg = square_avgs[i];
        auto& acc_delta = acc_deltas[i];
        square_avg.mul_(rho).addcmul_(grad, grad, 1 - rho);
        const auto grad_rms = square_avg.add(eps).sqrt_();
        const auto delta = acc_delta.add(eps).sqrt_().div_(grad_rms).mul_(grad);  // RMS[dx]/RMS[g]*g
        acc_delta.mul_(rho).addcmul_(delta, delta, 1 - rho);
        if (neg_lr.defined())
          params[i].add_(delta.mul_(neg_lr.to(delta.options())));
        else
          params[i].add_(delta, -lr);
      }
      continue;
    }
    // The same operations, each as one multi-tensor kernel per device and dtype (~11 launches per
    // step instead of ~11 per parameter), in torch.optim's _multi_tensor_adadelta order.
    for (const auto& indices : optim_detail::group_by_device_and_dtype(params)) {
      const auto p = optim_detail::pick(params, indices), sq = optim_detail::pick(square_avgs, indices),
                 acc = optim_detail::pick(acc_deltas, indices);
      auto g = optim_detail::pick(grads, indices);
      if (weight_decay != 0) g = torch::_foreach_add(g, p, weight_decay);
      torch::_foreach_mul_(sq, rho);
      torch::_foreach_addcmul_(sq, g, g, 1 - rho);
      const auto grad_rms = torch::_foreach_add(sq, eps);
      torch::_foreach_sqrt_(grad_rms);
      const auto delta = torch::_foreach_add(acc, eps);
      torch::_foreach_sqrt_(delta);
      torch::_foreach_div_(delta, grad_rms);
      torch::_foreach_mul_(delta, g);
      torch::_foreach_mul_(acc, rho);
      torch::_foreach_addcmul_(acc, delta, delta, 1 - rho);
      if (neg_lr.defined()) {  // read on the device: a captured graph follows set_lr
        torch::_foreach_mul_(delta, neg_lr.to(p.front().options()));
        torch::_foreach_add_(p, delta);
      } else {
        torch::_foreach_add_(p, delta, -lr);
      }
    }
  }
  return loss;
}

void Adadelta::make_capturable() {
  capturable_ = true;
  update_device_lr();
}

void Adadelta::update_device_lr() { device_lr_.update(param_groups_); }

void Adadelta::count_replayed_step() {
  for (auto& entry : state_) {
    auto& state = static_cast<AdadeltaParamState&>(*entry.second);
    state.step(state.step() + 1);
  }
}

const AdadeltaParamState* Adadelta::state_of(const torch::Tensor& param) const {
  const auto found = state_.find(optim_detail::state_key(state_, param));
  return found == state_.end() ? nullptr : static_cast<const AdadeltaParamState*>(found->second.get());
}

void Adadelta::step_unless_found_inf(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  optim_detail::SkipOnDevice skip(found_inf);
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const AdadeltaOptions&>(group.options());
    const double lr = options.lr(), rho = options.rho(), eps = options.eps(), weight_decay = options.weight_decay();
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      DDP_CHECK(!param.grad().is_sparse(), "Adadelta does not support sparse gradients", "use dense gradients");
      auto& state = state_for(param);
      // The per-tensor step of step(), out of place.
      auto grad = param.grad();
      if (weight_decay != 0) grad = grad.add(param, weight_decay);
      auto square_avg = state.square_avg().mul(rho).addcmul_(grad, grad, 1 - rho);
      const auto grad_rms = square_avg.add(eps).sqrt_();
      const auto delta = state.acc_delta().add(eps).sqrt_().div_(grad_rms).mul_(grad);
      auto acc_delta = state.acc_delta().mul(rho).addcmul_(delta, delta, 1 - rho);
      skip.commit(state.square_avg(), square_avg);
      skip.commit(state.acc_delta(), acc_delta);
      skip.commit(param, param.add(delta, -lr));
    }
  }
}

void Adadelta::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
  if (!grad_scaler_) return;
  torch::serialize::OutputArchive scaler;
  grad_scaler_->save(scaler);
  archive.write("grad_scaler", scaler);
}

void Adadelta::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
  torch::serialize::InputArchive scaler;
  if (grad_scaler_ && archive.try_read("grad_scaler", scaler)) grad_scaler_->load(scaler);
}

}  // namespace ddp
