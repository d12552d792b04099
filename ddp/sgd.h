// defines: Sgd — torch::optim::SGD (same options, state and snapshots) whose step uses multi-tensor
//          (_foreach_*) kernels when the parameters live on a GPU, as torch.optim.SGD does there by
//          default; on the CPU it is torch::optim::SGD's own per-tensor step. Mixed precision: it
//          takes GradScaler's found_inf and skips on the device (SupportsAmpScaling, grad_scaler.h).
//          CUDA graphs: make_capturable() puts the learning rate in a device tensor (GraphCapturable).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "ddp/detail/device_lr.h"  // defines: DeviceLearningRates
#include "ddp/grad_scaler.h"
#include "ddp/graph_capturable.h"  // defines: GraphCapturable

namespace ddp {

class Sgd : public torch::optim::SGD, public SupportsAmpScaling, public GraphCapturable {
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

  // GraphCapturable: from now on every step is the multi-tensor one (on the CPU too), its update
  // p += (-lr) x g multiplying by a device tensor that holds -lr (bit for bit the host-scalar step
  // for rates that are powers of two; others may differ in the last bit). SGD counts no steps.
  void make_capturable() override;
  void update_device_lr() override { device_lr_.update(param_groups_); }
  void count_replayed_step() override {}
  const torch::Tensor& device_lr(size_t group) const { return device_lr_.negated(group); }  // holds -lr

 private:
  std::optional<bool> foreach_;
  optim_detail::DeviceLearningRates device_lr_;  // capturable: each group's -lr on the device
};

}  // namespace ddp
