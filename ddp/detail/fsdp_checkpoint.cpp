#include "ddp/detail/fsdp_checkpoint.h"

#include <ATen/autocast_mode.h>  // defines: at::autocast (the forward's autocast state)

#include <optional>

#include "ddp/autocast.h"

namespace ddp::detail {
namespace {

// The autocast state of the device types LibTorch autocasts on (the flags are per thread).
struct AutocastState {
  struct One {
    torch::DeviceType device_type;
    bool enabled;
    torch::ScalarType dtype;
  };
  std::vector<One> types;
  bool cache_enabled = true;

  static AutocastState current() {
    AutocastState s;
    s.cache_enabled = at::autocast::is_autocast_cache_enabled();
    for (auto type : {torch::kCPU, torch::kCUDA})
      if (at::autocast::is_autocast_available(type))
        s.types.push_back({type, at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)});
    return s;
  }
};

struct CheckpointState : torch::CustomClassHolder {
  ModuleForward forward;
  std::function<void()> before_backward;
  std::vector<bool> needs_grad;
  AutocastState autocast;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<CheckpointState> state, at::TensorList inputs) {
    std::vector<torch::Tensor> args(inputs.begin(), inputs.end() - 1);  // the last one is the anchor
    ctx->save_for_backward(args);
    for (const auto& a : args) state->needs_grad.push_back(a.requires_grad());
    state->autocast = AutocastState::current();
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    torch::NoGradGuard no_grad;
    return {state->forward(args)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    state->before_backward();
    auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> args;
    for (size_t i = 0; i < saved.size(); ++i) args.push_back(saved[i].detach().requires_grad_(state->needs_grad[i]));
    torch::Tensor output;
    {
      torch::AutoGradMode grad_on(true);
      std::vector<std::optional<Autocast>> autocast(state->autocast.types.size());  // the forward's, re-entered
      for (size_t t = 0; t < autocast.size(); ++t) {
        const auto& one = state->autocast.types[t];
        autocast[t].emplace(AutocastOptions{.device_type = one.device_type,
                                            .dtype = one.dtype,
                                            .enabled = one.enabled,
                                            .cache_enabled = state->autocast.cache_enabled});
      }
      output = state->forward(args);
    }
    torch::autograd::backward({output}, {grad_outputs[0]});
    torch::autograd::variable_list grads{torch::Tensor()};  // the state
    for (const auto& a : args) grads.push_back(a.requires_grad() ? a.grad() : torch::Tensor());
    grads.push_back(torch::Tensor());  // the anchor
    return grads;
  }
};

}  // namespace

torch::Tensor checkpointed_call(const ModuleForward& forward, const std::vector<torch::Tensor>& args,
                                const torch::Tensor& anchor, std::function<void()> before_backward) {
  auto state = c10::make_intrusive<CheckpointState>();
  state->forward = forward;
  state->before_backward = std::move(before_backward);
  std::vector<torch::Tensor> inputs = args;
  inputs.push_back(anchor);
  return CheckpointFunction::apply(state, at::TensorList(inputs))[0];
}

}  // namespace ddp::detail
