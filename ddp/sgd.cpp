// The multi-tensor SGD step, in torch.optim's _multi_tensor_sgd order: every element sees the same
// operations as in torch::optim::SGD::step (weight decay, momentum buffer, Nesterov, update).
#include "ddp/sgd.h"

#include "ddp/detail/optimizer_helpers.h"
#include "ddp/error.h"

namespace ddp {

torch::Tensor Sgd::step(LossClosure closure) {
  if (scaler_attached()) {
    DDP_CHECK(closure == nullptr, "Sgd::step(closure) with a GradScaler attached",
              "step without a closure (PyTorch's GradScaler does not support closures either)");
    grad_scaler_->step(*this);  // comes back as step_unless_found_inf
    grad_scaler_->update();
    return {};
  }
  bool all_foreach = true;
  for (const auto& group : param_groups_)
    all_foreach = all_foreach && optim_detail::use_foreach(foreach_, group.params());
  if (!all_foreach && !capturable_) return torch::optim::SGD::step(std::move(closure));  // the per-tensor step
  if (capturable_) update_device_lr();

  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (size_t group_index = 0; group_index < param_groups_.size(); ++group_index) {
    auto& group = param_groups_[group_index];
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    const double lr = options.lr(), momentum = options.momentum(), dampening = options.dampening(),
                 weight_decay = options.weight_decay();
    std::vector<torch::Tensor> params;
    for (const auto& p : group.params())
      if (p.grad().defined()) {
        DDP_CHECK(!p.grad().is_sparse(), "Sgd's multi-tensor step does not support sparse gradients",
                  "use dense gradients");
        params.push_back(p);
      }
    for (const auto& indices : optim_detail::group_by_device_and_dtype(params)) {
      const auto p = optim_detail::pick(params, indices);
      std::vector<torch::Tensor> g;
      g.reserve(p.size());
      for (const auto& t : p) g.push_back(t.grad());
      if (weight_decay != 0) g = torch::_foreach_add(g, p, weight_decay);
      if (momentum != 0) {
        // The momentum buffers; a parameter's first step starts its buffer from the gradient.
        std::vector<torch::Tensor> buffers;
        bool all_have_buffers = true;
        for (const auto& t : p) all_have_buffers = all_have_buffers && state_.count(optim_detail::state_key(state_, t));
        for (size_t i = 0; i < p.size(); ++i) {
          auto& slot = state_[optim_detail::state_key(state_, p[i])];
          if (!slot) {
            auto fresh = std::make_unique<torch::optim::SGDParamState>();
            fresh->momentum_buffer(torch::clone(g[i]).detach());
            slot = std::move(fresh);
          } else if (!all_have_buffers) {
            auto& buf = static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer();
            buf.mul_(momentum).add_(g[i], 1 - dampening);
          }
          buffers.push_back(static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
        }
        if (all_have_buffers) {
          torch::_foreach_mul_(buffers, momentum);
          torch::_foreach_add_(buffers, g, 1 - dampening);
        }
        // (Python adds in place into the gradients here; the result is the same, .grad stays as it was.)
        g = options.nesterov() ? torch::_foreach_add(g, buffers, momentum) : buffers;
      }
      if (capturable_)  // the rate read on the device (out of place: g may be the momentum buffers)
        torch::_foreach_add_(p, torch::_foreach_mul(g, device_lr_.negated_like(group_index, p.front())));
      else
        torch::_foreach_add_(p, g, -lr);
    }
  }
  return loss;
}

void Sgd::make_capturable() {
  capturable_ = true;
  update_device_lr();
}

void Sgd::step_unless_found_inf(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  optim_detail::SkipOnDevice skip(found_inf);
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    const double momentum = options.momentum(), dampening = options.dampening(), weight_decay = options.weight_decay();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      DDP_CHECK(!p.grad().is_sparse(), "Sgd's mixed-precision step does not support sparse gradients",
                "use dense gradients");
      // torch::optim::SGD::step's operations, each into a new tensor, then kept or not.
      auto d_p = p.grad();
      if (weight_decay != 0) d_p = d_p.add(p, weight_decay);
      if (momentum != 0) {
        torch::Tensor buf;
        auto& slot = state_[optim_detail::state_key(state_, p)];
        if (!slot) {
          buf = torch::clone(d_p).detach();
          auto fresh = std::make_unique<torch::optim::SGDParamState>();
          fresh->momentum_buffer(torch::where(skip.on(p.device()), torch::zeros_like(buf), buf));
          slot = std::move(fresh);
        } else {
          auto& kept = static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer();
          buf = kept.mul(momentum).add_(d_p, 1 - dampening);
          skip.commit(kept, buf);
        }
        d_p = options.nesterov() ? d_p.add(buf, momentum) : buf;
      }
      skip.commit(p, p.add(d_p, -1 * options.lr()));
    }
  }
}

void Sgd::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::SGD::save(archive);
  if (!grad_scaler_) return;
  torch::serialize::OutputArchive scaler;
  grad_scaler_->save(scaler);
  archive.write("grad_scaler", scaler);
}

void Sgd::load(torch::serialize::InputArchive& archive) {
  torch::optim::SGD::load(archive);
  torch::serialize::InputArchive scaler;
  if (grad_scaler_ && archive.try_read("grad_scaler", scaler)) grad_scaler_->load(scaler);
}

}  // namespace ddp
