// grad_scaler_replay INPUTS OUT — the C++ half of the Python bridge test of ddp::GradScaler
// (python/grad_scaler_reference.py says what the run is): the same model, batches and float16
// autocast as Python's run, with ddp::GradScaler and ddp::Sgd, and with ddp::GradScaler and
// PyTorch's fused AdamW kernel (ddp::adam_step's found_inf form) behind an optimizer of this file
// that takes found_inf itself (the SupportsAmpScaling interface a user's optimizer implements).
// Writes the scale after every step, which steps changed the parameters, and the final parameters.
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/autocast.h"
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/grad_scaler.h"
#include "ddp/multi_tensor_adam.h"
#include "ddp/sgd.h"
#include "ddp/torch_pickle.h"

namespace {

// AdamW on one parameter group with the fused kernel: what torch.optim.AdamW(fused=True) runs.
class FusedAdamW : public torch::optim::Optimizer, public ddp::SupportsAmpScaling {
 public:
  FusedAdamW(std::vector<torch::Tensor> params, ddp::AdamOptions options)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<torch::optim::AdamWOptions>(options.lr)),
        options_(options) {
    for (const auto& p : param_groups_[0].params()) {
      exp_avg_.push_back(torch::zeros_like(p));
      exp_avg_sq_.push_back(torch::zeros_like(p));
    }
  }
  torch::Tensor step(LossClosure) override {
    step_unless_found_inf(torch::zeros({}));
    return {};
  }
  void step_unless_found_inf(const torch::Tensor& found_inf) override {
    std::vector<torch::Tensor> grads;
    for (const auto& p : param_groups_[0].params()) grads.push_back(p.grad());
    ddp::adam_step(param_groups_[0].params(), grads, exp_avg_, exp_avg_sq_, steps_, options_, found_inf);
  }

 private:
  ddp::AdamOptions options_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  torch::Tensor steps_ = torch::zeros({});
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ddp::Error("cannot read '" + path + "'", "run python/grad_scaler_reference.py make first");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

ddp::TensorDict run(std::map<std::string, torch::Tensor>& in, const std::string& name, bool adamw) {
  torch::nn::Sequential model(torch::nn::Linear(6, 8), torch::nn::Tanh(), torch::nn::Linear(8, 2));
  {
    torch::NoGradGuard no_grad;
    auto p = model->parameters();
    p[0].copy_(in.at("w1")), p[1].copy_(in.at("b1")), p[2].copy_(in.at("w2")), p[3].copy_(in.at("b2"));
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (adamw)
    optimizer = std::make_unique<FusedAdamW>(model->parameters(), ddp::AdamOptions{1e-2, 0.9, 0.999, 1e-8, 0.01, true});
  else
    optimizer = std::make_unique<ddp::Sgd>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ddp::GradScalerOptions options;
  options.growth_interval = in.at("growth_interval").item<int64_t>();
  ddp::GradScaler scaler(torch::kCPU, options);
  const int64_t steps = in.at("steps").item<int64_t>();
  std::vector<double> scales;
  std::vector<int64_t> changed;
  for (int64_t step = 0; step < steps; ++step) {
    optimizer->zero_grad();
    torch::Tensor loss;
    {
      ddp::Autocast amp({.device_type = torch::kCPU, .dtype = torch::kHalf});
      // (not "x" + std::to_string(step): GCC 12 warns falsely on that inlined concatenation)
      std::string x_key = "x", y_key = "y";
      x_key += std::to_string(step);
      y_key += std::to_string(step);
      loss = torch::mse_loss(model->forward(in.at(x_key)), in.at(y_key));
    }
    scaler.scale(loss).backward();
    std::vector<torch::Tensor> before;
    for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
    scaler.step(*optimizer);
    scaler.update();
    scales.push_back(scaler.get_scale());
    bool any = false;
    for (size_t i = 0; i < before.size(); ++i) any = any || !torch::equal(before[i], model->parameters()[i]);
    changed.push_back(any ? 1 : 0);
  }
  ddp::TensorDict out;
  out.emplace_back(name + "/scale", torch::tensor(scales, torch::kFloat64));
  out.emplace_back(name + "/changed", torch::tensor(changed, torch::kInt64));
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    out.emplace_back(name + "/param" + std::to_string(i), params[i].detach().clone());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUTS OUT (see python/grad_scaler_reference.py)\n", argv[0]);
    return 2;
  }
  try {
    torch::set_num_threads(1);
    std::map<std::string, torch::Tensor> in;
    for (auto& [key, value] : ddp::tensor_dict_from_bytes(read_bytes(argv[1]), argv[1])) in[key] = value;
    ddp::TensorDict out = run(in, "sgd", false);
    for (auto& item : run(in, "adamw", true)) out.push_back(item);
    ddp::write_file_atomically(argv[2], ddp::tensor_dict_to_bytes(out), "OUT");
    for (const std::string name : {"sgd", "adamw"}) {
      for (const auto& [key, value] : out)
        if (key == name + "/scale") std::printf("C++ %s: final scale %g\n", name.c_str(), value[-1].item<double>());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grad_scaler_replay: %s\n", e.what());
    return 1;
  }
}
