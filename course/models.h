// defines: Model (the interface every course model has: forward(x)), the linear regressor of the
//          synthetic workload, and the MNIST CNN of the Della / pytorch examples seed.
#pragma once

#include <torch/torch.h>

#include <memory>

namespace ddpw {

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

// Linear(features, 1): the tutorial's model.
class LinearRegressor : public Model {
 public:
  explicit LinearRegressor(int64_t features = 20);
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  torch::nn::Linear fc{nullptr};
};

// conv(1->32, 3) -> relu -> conv(32->64, 3) -> relu -> maxpool 2 -> dropout 0.25 -> fc 9216->128 ->
// relu -> dropout 0.5 -> fc 128->10 -> log_softmax. Input [N, 1, 28, 28].
class MnistCnn : public Model {
 public:
  MnistCnn();
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Dropout dropout1{nullptr}, dropout2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

}  // namespace ddpw
