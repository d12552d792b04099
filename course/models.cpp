// The course's models. Submodule names (fc, conv1, ...) are the keys in snapshots: keep them.
#include "course/models.h"

namespace ddpw {

torch::Tensor Model::forward(const torch::Tensor& x) {
  if (!autocast_) return compute(x);
  ddp::Autocast amp(*autocast_);
  return compute(x);
}

void Model::set_mixed_precision(std::optional<ddp::AutocastOptions> autocast, std::shared_ptr<ddp::GradScaler> scaler) {
  autocast_ = autocast;
  scaler_ = std::move(scaler);
}

LinearRegressor::LinearRegressor(int64_t features) { fc = register_module("fc", torch::nn::Linear(features, 1)); }

torch::Tensor LinearRegressor::compute(const torch::Tensor& x) { return fc->forward(x); }

// pytorch/examples mnist/main.py `Net`, layer for layer.
MnistCnn::MnistCnn() {
  conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).stride(1)));
  conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(1)));
  dropout1 = register_module("dropout1", torch::nn::Dropout(0.25));
  dropout2 = register_module("dropout2", torch::nn::Dropout(0.5));
  fc1 = register_module("fc1", torch::nn::Linear(9216, 128));  // 64 channels x 12 x 12
  fc2 = register_module("fc2", torch::nn::Linear(128, 10));
}

torch::Tensor MnistCnn::compute(const torch::Tensor& x) {
  auto h = torch::relu(conv1->forward(x));  // [N, 32, 26, 26]
  h = torch::relu(conv2->forward(h));       // [N, 64, 24, 24]
  h = torch::max_pool2d(h, 2);              // [N, 64, 12, 12]
  h = dropout1->forward(h);
  h = torch::flatten(h, 1);  // [N, 9216]
  h = dropout2->forward(torch::relu(fc1->forward(h)));
  return torch::log_softmax(fc2->forward(h), 1);  // [N, 10]
}

}  // namespace ddpw
