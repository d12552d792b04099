// defines: Model (the interface every course model has: forward(x), under autocast when the run is
//          mixed precision), the linear regressor of the synthetic workload, and the MNIST CNN of the
//          Della / pytorch examples seed.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

#include "ddp/autocast.h"
#include "ddp/grad_scaler.h"

namespace ddpw {

class Model : public torch::nn::Module {
 public:
  // The layers (compute), inside a ddp::Autocast when mixed precision is set: the step programs'
  // model_->forward(x) runs in bf16/fp16 without a line of their own.
  torch::Tensor forward(const torch::Tensor& x);

  // --precision (make_workload sets it): autocast around forward(), none for fp32; for fp16 also the
  // GradScaler that scales this model's loss (workload.h), which the workload's optimizers attach
  // and ZeRO's optimizer takes from the model (grad_scaler(), sharded_adamw.h).
  void set_mixed_precision(std::optional<ddp::AutocastOptions> autocast, std::shared_ptr<ddp::GradScaler> scaler);
  const std::optional<ddp::AutocastOptions>& autocast() const { return autocast_; }
  const std::shared_ptr<ddp::GradScaler>& grad_scaler() const { return scaler_; }

 protected:
  virtual torch::Tensor compute(const torch::Tensor& x) = 0;

 private:
  std::optional<ddp::AutocastOptions> autocast_;
  std::shared_ptr<ddp::GradScaler> scaler_;
};

// Linear(features, 1): the tutorial's model.
class LinearRegressor : public Model {
 public:
  explicit LinearRegressor(int64_t features = 20);

 protected:
  torch::Tensor compute(const torch::Tensor& x) override;

 private:
  torch::nn::Linear fc{nullptr};
};

// conv(1->32, 3) -> relu -> conv(32->64, 3) -> relu -> maxpool 2 -> dropout 0.25 -> fc 9216->128 ->
// relu -> dropout 0.5 -> fc 128->10 -> log_softmax. Input [N, 1, 28, 28].
class MnistCnn : public Model {
 public:
  MnistCnn();

 protected:
  torch::Tensor compute(const torch::Tensor& x) override;

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Dropout dropout1{nullptr}, dropout2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

}  // namespace ddpw
