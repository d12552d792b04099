// Adadelta (Zeiler 2012) exactly as torch.optim.Adadelta's single-tensor path computes it, so a
// C++ run follows the Python seed's numbers. State is created at a parameter's first gradient.
#include "ddp/adadelta.h"

#include <torch/optim/serialize.h>
#include <torch/version.h>

#include <sstream>
#include <type_traits>

namespace ddp {
namespace {

// The optimizer's state is keyed by the parameter's TensorImpl: its address on LibTorch 2.x, the
// address printed as text on 1.13 (what that version's serialize.h looks up).
template <typename StateMap>
typename StateMap::key_type state_key(const StateMap&, const torch::Tensor& param) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream text;
    text << param.unsafeGetTensorImpl();
    return text.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace

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
    : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                std::make_unique<AdadeltaOptions>(options)) {
  // The same checks (and limits) as torch.optim.Adadelta's constructor.
  TORCH_CHECK(options.lr() >= 0, "Adadelta: invalid learning rate ", options.lr(), " (must be >= 0)");
  TORCH_CHECK(options.rho() >= 0 && options.rho() <= 1, "Adadelta: invalid rho ", options.rho(),
              " (must be in [0, 1])");
  TORCH_CHECK(options.eps() >= 0, "Adadelta: invalid eps ", options.eps(), " (must be >= 0)");
  TORCH_CHECK(options.weight_decay() >= 0, "Adadelta: invalid weight_decay ", options.weight_decay(),
              " (must be >= 0)");
}

Adadelta::Adadelta(std::vector<torch::Tensor> params, double lr, double rho, double eps, double weight_decay)
    : Adadelta(std::move(params), AdadeltaOptions(lr).rho(rho).eps(eps).weight_decay(weight_decay)) {}

torch::Tensor Adadelta::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const AdadeltaOptions&>(group.options());
    const double rho = options.rho(), eps = options.eps();
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto grad = param.grad();
      TORCH_CHECK(!grad.is_sparse(), "Adadelta does not support sparse gradients");

      auto& slot = state_[state_key(state_, param)];
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

      if (options.weight_decay() != 0) grad = grad.add(param, options.weight_decay());
      auto& square_avg = state.square_avg();
      auto& acc_delta = state.acc_delta();
      square_avg.mul_(rho).addcmul_(grad, grad, 1 - rho);
      const auto grad_rms = square_avg.add(eps).sqrt_();
      const auto delta = acc_delta.add(eps).sqrt_().div_(grad_rms).mul_(grad);  // RMS[Δx]/RMS[g]·g
      acc_delta.mul_(rho).addcmul_(delta, delta, 1 - rho);
      param.add_(delta, -options.lr());
    }
  }
  return loss;
}

const AdadeltaParamState* Adadelta::state_of(const torch::Tensor& param) const {
  const auto found = state_.find(state_key(state_, param));
  return found == state_.end() ? nullptr : static_cast<const AdadeltaParamState*>(found->second.get());
}

void Adadelta::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

void Adadelta::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
#if TORCH_VERSION_MAJOR < 2
  // 1.13's loader restores the per-parameter state but drops the saved group options (lr, rho,
  // ...); 2.x copies them back. Do it here so both versions resume alike.
  torch::serialize::InputArchive groups_archive;
  archive.read("param_groups", groups_archive);
  std::vector<std::pair<std::vector<std::string>, std::unique_ptr<torch::optim::OptimizerOptions>>> saved;
  torch::optim::detail::serialize<AdadeltaOptions>(groups_archive, saved);
  for (size_t i = 0; i < saved.size(); ++i) {  // the count was checked by the loader above
    static_cast<AdadeltaOptions&>(param_groups_[i].options()) = static_cast<AdadeltaOptions&>(*saved[i].second);
  }
#endif
}

}  // namespace ddp
