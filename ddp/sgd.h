// defines: Sgd — torch::optim::SGD (same options, state and snapshots) whose step uses multi-tensor
//          (_foreach_*) kernels when the parameters live on a GPU, as torch.optim.SGD does there by
//          default; on the CPU it is torch::optim::SGD's own per-tensor step. Mixed precision: it
//          takes GradScaler's found_inf and skips on the device (SupportsAmpScaling, grad_scaler.h).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "ddp/grad_scaler.h"

namespace ddp {

class Sgd : public torch::optim::SGD, public SupportsAmpScaling {
 public:
  Sgd(std::vector<torch::Tensor> params, torch::optim::SGDOptions options)
      : torch::optim::SGD(std::move(params), std::move(options)) {}
  // With a GradScaler attached (set_grad_scaler): scaler.step(*this) and scaler.update(); no closure.
  torch::Tensor step(LossClosure closure = nullptr) override;
  // torch::optim::SGD's per-tensor step, each result kept only where found_inf is 0 (a select on
  // the device): bit for bit the plain step when nothing is found. A first step with momentum that
  // is skipped leaves zero momentum buffers, so the next one starts them at (1 - dampening) x grad,
  // not at grad (the same for dampening 0, the default; PyTorch's fused SGD leaves them uninitialised).
  void step_unless_found_inf(const torch::Tensor& found_inf) override;
  // The snapshot (torch::optim::SGD's) plus an attached scaler's state under "grad_scaler".
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // Multi-tensor kernels (torch.optim.SGD's foreach=True) or one tensor at a time (False). Unset,
  // as in Python: multi-tensor when every parameter of a group is on a CUDA device.
  void set_foreach(std::optional<bool> foreach) { foreach_ = foreach; }

 private:
  std::optional<bool> foreach_;
};

}  // namespace ddp
