#include "ddp/detail/gradient_hooks.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace ddp {

GradientHooks::GradientHooks(const std::vector<torch::Tensor>& params, std::function<void(size_t)> on_ready) {
  auto ready = std::make_shared<std::function<void(size_t)>>(std::move(on_ready));
  std::weak_ptr<int> alive = alive_;
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [ready, i, alive](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (!alive.expired()) (*ready)(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientHooks::~GradientHooks() = default;

std::vector<c10::Stream> GradientHooks::streams() const {
  std::vector<c10::Stream> out;
  for (const auto& accumulator : accumulators_)
    if (auto stream = accumulator->stream()) out.push_back(*stream);
  return out;
}

std::shared_ptr<std::atomic<bool>> GradientHooks::call_at_end_of_backward(std::function<void()> on_end) {
  struct Watch {
    explicit Watch(std::shared_ptr<std::atomic<bool>> flag) : abandoned(std::move(flag)) {}
    Watch(const Watch&) = delete;  // a copy's destructor would raise the flag
    Watch& operator=(const Watch&) = delete;
    ~Watch() {
      if (!ran) abandoned->store(true);
    }
    std::shared_ptr<std::atomic<bool>> abandoned;
    bool ran = false;
  };
  auto abandoned = std::make_shared<std::atomic<bool>>(false);
  auto watch = std::make_shared<Watch>(abandoned);
  std::weak_ptr<int> alive = alive_;
  torch::autograd::Engine::get_default_engine().queue_callback([alive, watch, on_end = std::move(on_end)] {
    watch->ran = true;
    if (!alive.expired()) on_end();
  });
  return abandoned;
}

}  // namespace ddp
