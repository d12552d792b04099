// defines: CudaGraphStep, CudaGraphOptions, CaptureContext — a whole training step (forward,
//          backward with DDP's bucketed allreduces, the optimizer's step) captured once in a CUDA
//          graph and replayed: one launch per step instead of hundreds (PyTorch's "whole-network
//          capture", torch.cuda.graph).
//
//   ddp::Adadelta optimizer(model->parameters());                 // GraphCapturable (ddp::Sgd too)
//   auto step = [&](const torch::Tensor& x, const torch::Tensor& y) {
//     optimizer.zero_grad();                                      // .grad to none: made in the graph's pool
//     auto loss = torch::nll_loss(ddp_model(x), y);
//     loss.backward();                                            // the buckets' allreduces (NCCL) are captured
//     optimizer.step();
//     return loss;
//   };
//   ddp::CudaGraphStep graphed(step, optimizer, {.device = device, .backend = pg->backend_name()});
//   for (...) loss = graphed(batch.input, batch.target);          // the loss: a copy, yours to keep
//
//   * The first warmup_steps calls run `step` eagerly on a side stream (PyTorch's warm-up: the
//     optimizer's state and cuDNN's choices are made then, outside the graph); the next call
//     captures it on a side stream with the allocator's private pool for the graph, then replays it;
//     every later call copies the batch into the static input tensors and replays.
//   * The learning rate lives in a device tensor (GraphCapturable::make_capturable, called here):
//     set_lr or a schedule between steps moves it; before each replay a changed rate is copied
//     into that tensor (a fill kernel, no synchronization). Host-side step counts are advanced.
//   * Dropout and other random kernels: the default CUDA generator is registered with the graph
//     at capture (at::cuda::CUDAGraph does it), so each replay draws new numbers; a generator of
//     your own must be registered too (not offered here).
//   * A batch of another shape or dtype than the captured one (the last, partial batch of an
//     epoch) runs `step` eagerly on it, on the same parameters, gradients and optimizer state:
//     the same numbers as an eager run; eager_on_shape_change = false refuses it instead.
//   * Refused with a ddp::Error naming the fix (check()): a CPU device, a build without CUDA, a
//     Gloo process group (its collectives on CUDA tensors go through the host: not capturable),
//     find_unused_parameters (the host reads which parameters were used, every step), an
//     optimizer that is not GraphCapturable (its learning rate would be frozen into the graph),
//     GradScaler (fp16: its skip and scale decisions) and autocast (its weight cache is not
//     graph-safe). Join (uneven inputs) and SyncBatchNorm are not checked: do not capture them.
//   * NCCL collectives inside a capture need NCCL >= 2.9.6 (LibTorch ships a newer one).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ddp/distributed_data_parallel.h"  // defines: DdpOptions

namespace ddp {

struct CudaGraphOptions {
  int64_t warmup_steps = 3;           // eager steps before the capture (at least 1: the optimizer's state)
  bool eager_on_shape_change = true;  // another batch shape runs eagerly; false: a ddp::Error
};

// What the step does, for the refusals (CudaGraphStep::check).
struct CaptureContext {
  torch::Device device = torch::kCPU;  // where the model and the batches live
  std::string backend;                 // the DDP's process group's backend_name(); "" without DDP
  DdpOptions ddp;                      // the DDP's options, when the step trains under DDP
  bool grad_scaler = false;            // the step scales the loss with a GradScaler (fp16)
  bool autocast = false;               // the step runs under autocast (bf16, fp16)
};

class CudaGraphStep {
 public:
  using StepFunction = std::function<torch::Tensor(const torch::Tensor& input, const torch::Tensor& target)>;
  // `step` trains on (input, target) and returns the loss; `optimizer` is the one it steps. Checks
  // the context (check()) and makes the optimizer capturable; captures nothing yet.
  CudaGraphStep(StepFunction step, torch::optim::Optimizer& optimizer, const CaptureContext& context,
                CudaGraphOptions options = {});
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // One training step on this batch: eager (warm-up, another shape), the capture, or a replay.
  // Returns the loss, a tensor of its own (the next replay does not overwrite it).
  torch::Tensor operator()(const torch::Tensor& input, const torch::Tensor& target);

  bool captured() const;
  int64_t replays() const;      // steps run by replaying the graph (the captured step included)
  int64_t eager_steps() const;  // warm-up steps and batches of another shape

  // Throws a ddp::Error naming the fix if a step in this context cannot be captured honestly.
  static void check(const CaptureContext& context, const torch::optim::Optimizer& optimizer);

 private:
  struct Graph;  // the CUDA graph and its streams (CUDA's headers stay in the .cpp)
  StepFunction step_;
  torch::optim::Optimizer& optimizer_;
  CaptureContext context_;
  CudaGraphOptions options_;
  torch::Tensor static_input_, static_target_, static_loss_;
  int64_t replays_ = 0, eager_steps_ = 0, calls_ = 0;
  std::unique_ptr<Graph> graph_;
};

}  // namespace ddp
