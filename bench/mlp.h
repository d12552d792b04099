// defines: Mlp — the benchmarks' gradient-heavy model: hidden_layers x (Linear(width, width) + ReLU)
//          + Linear(width, classes); 10.5 M parameters (42 MB in float32) by default, enough
//          gradient to show what overlapping communication buys and what sharding saves.
#pragma once

#include <torch/torch.h>

#include "course/models.h"

namespace bench {

class Mlp : public ddpw::Model {
 public:
  explicit Mlp(int64_t width = 1024, int hidden_layers = 10, int64_t classes = 10) {
    for (int i = 0; i < hidden_layers; ++i) {
      layers_->push_back(torch::nn::Linear(width, width));
      layers_->push_back(torch::nn::ReLU());
    }
    layers_->push_back(torch::nn::Linear(width, classes));
    register_module("layers", layers_);
  }

 protected:
  torch::Tensor compute(const torch::Tensor& x) override { return layers_->forward(x); }

 private:
  torch::nn::Sequential layers_;
};

}  // namespace bench
