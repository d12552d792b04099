// defines: Adadelta — the optimizer of PyTorch's image-classification example (torch.optim.
//          Adadelta, lr 1.0), which the C++ frontend does not have. Built like Adagrad (options per
//          parameter group, so set_lr works and schedulers apply); save/load keep every group's
//          options and each parameter's square_avg, acc_delta and step, so a resumed run is
//          bit-identical. Like torch.optim.Adadelta it updates all parameters of a device with multi-tensor
//          (_foreach_*) kernels when they live on a GPU, one tensor at a time on the CPU. Mixed
//          precision: it takes GradScaler's found_inf and skips on the device (SupportsAmpScaling).
//          CUDA graphs: make_capturable() puts the learning rate in a device tensor (GraphCapturable).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "ddp/detail/device_lr.h"  // defines: DeviceLearningRates
#include "ddp/grad_scaler.h"
#include "ddp/graph_capturable.h"  // defines: GraphCapturable

namespace ddp {

struct AdadeltaOptions : public torch::optim::OptimizerCloneableOptions<AdadeltaOptions> {
  AdadeltaOptions(double lr = 1.0);  // NOLINT: implicit, as torch's loader builds it from an lr
  TORCH_ARG(double, lr) = 1.0;
  TORCH_ARG(double, rho) = 0.9;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;

 public:  // TORCH_ARG leaves the section private
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct AdadeltaParamState : public torch::optim::OptimizerCloneableParamState<AdadeltaParamState> {
  TORCH_ARG(torch::Tensor, square_avg);  // running mean of grad²
  TORCH_ARG(torch::Tensor, acc_delta);   // running mean of update²
  TORCH_ARG(int64_t, step) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Adadelta : public torch::optim::Optimizer, public SupportsAmpScaling, public GraphCapturable {
 public:
  explicit Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions options = {});
  Adadelta(std::vector<torch::Tensor> params, double lr, double rho = 0.9, double eps = 1e-6, double weight_decay = 0);
  // With a GradScaler attached (set_grad_scaler): scaler.step(*this) and scaler.update(); no closure.
  torch::Tensor step(LossClosure closure = nullptr) override;
  // The per-tensor step's operations, each into a new tensor kept only where found_inf is 0 (a
  // select on the device): bit for bit the plain CPU step when nothing is found. A skipped step
  // still counts in each state's `step` (a count the update does not use).
  void step_unless_found_inf(const torch::Tensor& found_inf) override;
  // An attached scaler's state goes with the optimizer's, under "grad_scaler".
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // A parameter's state; nullptr before its first step with a gradient.
  const AdadeltaParamState* state_of(const torch::Tensor& param) const;

  // Multi-tensor kernels (torch.optim.Adadelta's foreach=True) or one tensor at a time (False).
  // Unset, as in Python: multi-tensor when every parameter of a group is on a CUDA device. Both
  // compute the same operations in the same order on every element.
  void set_foreach(std::optional<bool> foreach) { foreach_ = foreach; }

  // GraphCapturable: the update p += (-lr) x delta multiplies by a device tensor holding -lr (a
  // power of two, as the CNN's 1.0, gives the same bits as the host-scalar step; other rates may
  // differ from it in the last bit, being rounded to the parameters' dtype first, as on the GPU).
  void make_capturable() override;
  void update_device_lr() override;
  void count_replayed_step() override;
  const torch::Tensor& device_lr(size_t group) const { return device_lr_.negated(group); }  // holds -lr

 private:
  // The parameter's state, created at its first gradient (zeros); counts this step.
  AdadeltaParamState& state_for(const torch::Tensor& param);
  std::optional<bool> foreach_;
  optim_detail::DeviceLearningRates device_lr_;  // capturable: each group's -lr on the device
};

}  // namespace ddp
