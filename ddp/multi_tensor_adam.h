// defines: AdamOptions, adam_step — one Adam or AdamW step over lists of tensors with the
//          multi-tensor kernels (torch::_foreach_*: one call per operation for all tensors, not one
//          per tensor), in the order of operations of torch.optim.AdamW's foreach implementation, so
//          float64 results equal PyTorch's bit for bit on CPU. The sharded optimizer calls it on its
//          shards; it works as well on whole parameters. With found_inf (mixed precision, GradScaler)
//          it is PyTorch's fused kernel instead, which skips the step on the device.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ddp {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = true;  // AdamW (p *= 1 - lr * wd); false: Adam (grad += wd * p)
};

// Updates params, exp_avgs and exp_avg_sqs in place (all lists of equal length and matching
// shapes; grads are only read). `step` counts this step, 1 for the first: bias correction uses it.
void adam_step(torch::TensorList params, torch::TensorList grads, torch::TensorList exp_avgs,
               torch::TensorList exp_avg_sqs, int64_t step, const AdamOptions& options);

// The step GradScaler's found_inf can skip (a 0-dim float32 tensor on the parameters' device; it is
// never read on the host): where it is nonzero, params, exp_avgs, exp_avg_sqs and `step` stay as
// they are. `step` counts the steps applied so far (0-dim float32 on the device, as a torch.optim
// state step); it advances here unless found_inf. The update is PyTorch's fused Adam/AdamW kernel
// (torch._fused_adam_/_fused_adamw_: what torch.optim.AdamW(fused=True) runs, the kind GradScaler
// hands found_inf to); its rounding differs from the multi-tensor step above in the last bits.
void adam_step(torch::TensorList params, torch::TensorList grads, torch::TensorList exp_avgs,
               torch::TensorList exp_avg_sqs, torch::Tensor& step, const AdamOptions& options,
               const torch::Tensor& found_inf);

}  // namespace ddp
