#include "ddp/multi_tensor_adam.h"

#include <cmath>
#include <optional>
#include <vector>

#include "ddp/error.h"

namespace ddp {

void adam_step(torch::TensorList params, torch::TensorList grads, torch::TensorList exp_avgs,
               torch::TensorList exp_avg_sqs, int64_t step, const AdamOptions& o) {
  DDP_CHECK(params.size() == grads.size() && params.size() == exp_avgs.size() && params.size() == exp_avg_sqs.size(),
            "adam_step needs as many gradients and moments as parameters",
            "pass one gradient, one exp_avg and one exp_avg_sq per parameter, in the same order");
  DDP_CHECK(step >= 1, "adam_step counts steps from 1", "pass the number of this step, 1 for the first");
  if (params.empty()) return;
  torch::NoGradGuard no_grad;
  // torch.optim.AdamW (foreach): decay, moments, bias corrections as Python floats, update.
  std::vector<torch::Tensor> g = grads.vec();
  if (o.weight_decay != 0) {
    if (o.decoupled_weight_decay)
      torch::_foreach_mul_(params, 1 - o.lr * o.weight_decay);
    else
      g = torch::_foreach_add(grads, params, o.weight_decay);  // L2: a new list, .grad stays as it is
  }
  torch::_foreach_lerp_(exp_avgs, g, 1 - o.beta1);
  torch::_foreach_mul_(exp_avg_sqs, o.beta2);
  torch::_foreach_addcmul_(exp_avg_sqs, g, g, 1 - o.beta2);
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(o.beta1, t);
  const double bias_correction2 = 1 - std::pow(o.beta2, t);
  const double step_size = (o.lr / bias_correction1) * -1;
  const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);  // Python's bc ** 0.5
  auto denom = torch::_foreach_sqrt(exp_avg_sqs);
  torch::_foreach_div_(denom, bias_correction2_sqrt);
  torch::_foreach_add_(denom, o.eps);
  torch::_foreach_addcdiv_(params, exp_avgs, denom, step_size);
}

void adam_step(torch::TensorList params, torch::TensorList grads, torch::TensorList exp_avgs,
               torch::TensorList exp_avg_sqs, torch::Tensor& step, const AdamOptions& o,
               const torch::Tensor& found_inf) {
  DDP_CHECK(params.size() == grads.size() && params.size() == exp_avgs.size() && params.size() == exp_avg_sqs.size(),
            "adam_step needs as many gradients and moments as parameters",
            "pass one gradient, one exp_avg and one exp_avg_sq per parameter, in the same order");
  DDP_CHECK(step.defined() && step.dim() == 0 && found_inf.defined() && found_inf.dim() == 0,
            "adam_step with found_inf needs a 0-dim step tensor and a 0-dim found_inf",
            "pass the step count and GradScaler's found_inf as 0-dim tensors");
  if (params.empty()) return;
  torch::NoGradGuard no_grad;
  // As torch.optim.adam._fused_adam: count the step, run the kernel (it returns at once when
  // found_inf is set), take the count back where it was skipped.
  step.add_(1);
  const std::vector<torch::Tensor> steps(params.size(), step);
  const std::optional<torch::Tensor> skip = found_inf;
  if (o.decoupled_weight_decay)
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr, o.beta1, o.beta2,
                      o.weight_decay, o.eps, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
  else
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr, o.beta1, o.beta2,
                     o.weight_decay, o.eps, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
  step.sub_(found_inf);
}

}  // namespace ddp
