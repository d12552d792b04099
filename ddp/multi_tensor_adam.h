// defines: AdamOptions, adam_step — one Adam or AdamW step over lists of tensors with the
//          multi-tensor kernels (torch::_foreach_*: one call per operation for all tensors, not one
//          per tensor), in the order of operations of torch.optim.AdamW's foreach implementation, so
//          float64 results equal PyTorch's bit for bit on CPU. The sharded optimizer calls it on its
//          shards; it works as well on whole parameters.
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

}  // namespace ddp
