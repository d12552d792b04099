// defines: the FullyShardedDataParallel scenarios shared by the CPU tests (test_fully_sharded.cpp)
//          and the GPU suite (test_gpu_fsdp.cpp): TinyNet (a small transformer-shaped model whose
//          blocks are called through ddp::call), the batches, the one-process reference (AdamW on the
//          whole model, whole batch), train_fsdp and equals_one_process (4 variants in one group).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/fully_sharded.h"
#include "ddp/module_call.h"
#include "ddp/weights_io.h"

namespace fsdp_scenarios {

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t d, int64_t h) {
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    fc1 = register_module("fc1", torch::nn::Linear(d, h));
    fc2 = register_module("fc2", torch::nn::Linear(h, d));
  }
  torch::Tensor forward(torch::Tensor x) { return x + fc2(torch::tanh(fc1(ln(x)))); }
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    embed = register_module("embed", torch::nn::Linear(5, 8));
    const int64_t widths[] = {7, 13, 5};  // uneven units
    for (int i = 0; i < 3; ++i) blocks.push_back(register_module("blocks" + std::to_string(i), Block(8, widths[i])));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})));
    head = register_module("head", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto h = embed(x);
    for (auto& block : blocks) h = ddp::call(block, h);
    return head(ln_f(h));
  }
  std::vector<torch::nn::ModuleHolder<BlockImpl>> blocks;
  torch::nn::Linear embed{nullptr}, head{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(TinyNet);

inline std::shared_ptr<TinyNetImpl> make_net(const torch::Device& device = torch::kCPU) {
  torch::manual_seed(7);
  auto net = std::make_shared<TinyNetImpl>();
  // LayerNorm starts at 1 and 0: perturb it, so its gradients matter from the first step.
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.add_(torch::randn_like(p) * 0.05);
  net->to(device);
  return net;
}

inline std::vector<std::shared_ptr<torch::nn::Module>> units_of(TinyNetImpl& net) {
  std::vector<std::shared_ptr<torch::nn::Module>> units;
  for (auto& b : net.blocks) units.push_back(b.ptr());
  return units;
}

constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3, 4
// eps near the gradients' size: Adam's step then depends on their scale (with 1e-8 it hardly does,
// and gradients summed instead of averaged over the ranks would pass).
inline const ddp::AdamOptions kAdam{.lr = 0.02, .eps = 1e-3, .weight_decay = 0.1};

// Micro-batch `k` of the whole run (the same on every rank).
inline std::pair<torch::Tensor, torch::Tensor> batch(int k, const torch::Device& device = torch::kCPU) {
  auto gen = at::detail::createCPUGenerator(1000 + k);
  auto x = torch::randn({kGlobalBatch, 5}, gen);
  auto y = torch::randint(0, 3, {kGlobalBatch}, gen);
  return {x.to(device), y.to(device)};
}

inline std::pair<torch::Tensor, torch::Tensor> my_share(const std::pair<torch::Tensor, torch::Tensor>& b, int rank,
                                                        int n) {
  const int64_t per = kGlobalBatch / n;
  return {b.first.narrow(0, rank * per, per), b.second.narrow(0, rank * per, per)};
}

// One process, the whole batch: plain module, AdamW on the full parameters.
inline ddp::TensorDict reference(int steps, int micro, const torch::Device& device = torch::kCPU) {
  auto net = make_net(device);
  std::vector<torch::Tensor> params = net->parameters(), m, v;
  for (auto& p : params) {
    m.push_back(torch::zeros_like(p));
    v.push_back(torch::zeros_like(p));
  }
  for (int s = 0; s < steps; ++s) {
    for (auto& p : params) p.mutable_grad().reset();
    for (int k = 0; k < micro; ++k) {
      auto [x, y] = batch(s * micro + k, device);
      (torch::nn::functional::cross_entropy(net->forward(x), y) / micro).backward();
    }
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> data, grads;
    for (auto& p : params) {
      data.push_back(p.detach());
      grads.push_back(p.grad());
    }
    ddp::adam_step(data, grads, m, v, s + 1, kAdam);
  }
  return ddp::state_dict(*net);
}

inline double max_difference(const ddp::TensorDict& a, const ddp::TensorDict& b) {
  if (a.size() != b.size()) return 1e30;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !a[i].second.sizes().equals(b[i].second.sizes())) return 1e30;
    worst =
        std::max(worst, (a[i].second.to(torch::kFloat64) - b[i].second.to(torch::kFloat64)).abs().max().item<double>());
  }
  return worst;
}

struct Variant {
  const char* name;
  bool reshard_after_forward = true;
  bool prefetch = true;
  bool checkpoint = false;
  int micro = 1;  // micro-batches per step; all but the last under no_sync()
};

constexpr int kSteps = 2;            // Adam's first two steps (the second uses the moments of the first)
constexpr double kTolerance = 1e-6;  // float32; measured: up to 1.5e-7 on 2-4 ranks, 0 on 1

inline ddp::TensorDict train_fsdp(const std::shared_ptr<ddp::ProcessGroup>& pg, const Variant& v, int steps,
                                  ddp::FullyShardedOptions o = {}) {
  const torch::Device device = pg->device();
  auto net = make_net();  // on the host: the wrapper moves only this rank's shards to the device
  o.device = device;
  o.reshard_after_forward = v.reshard_after_forward;
  o.prefetch = v.prefetch;
  o.checkpoint_activations = v.checkpoint;
  ddp::FullyShardedDataParallel<TinyNetImpl> model(net, units_of(*net), pg, o);
  ddp::FullyShardedAdamW optimizer(model, kAdam);
  const int rank = pg->rank(), n = pg->size();
  for (int s = 0; s < steps; ++s) {
    optimizer.zero_grad();
    for (int k = 0; k < v.micro; ++k) {
      auto [x, y] = my_share(batch(s * v.micro + k, device), rank, n);
      auto loss = torch::nn::functional::cross_entropy(model(x), y) / v.micro;
      if (k + 1 < v.micro) {
        auto no_sync = model.no_sync();
        loss.backward();
        // Nothing sent: the full gradients stay here, the shards have none yet.
        bool sent = model.engine()->full_gradient_bytes() == 0;
        for (const auto& shard : model.parameters()) sent |= shard.grad().defined();
        if (sent) throw std::runtime_error(std::string(v.name) + ": a backward under no_sync() reduced its gradients");
      } else {
        loss.backward();
      }
    }
    if (model.engine()->gathered_bytes() != 0 || model.engine()->full_gradient_bytes() != 0)
      throw std::runtime_error(std::string(v.name) + ": gathered parameters or full gradients left after backward");
    optimizer.step();
  }
  return model.full_state_dict();
}

inline int equals_one_process(int rank, const std::shared_ptr<ddp::ProcessGroup>& pg) {
  const Variant variants[] = {
      {"reshard after forward, prefetch"},
      {"the same with checkpointing", true, true, true},
      {"kept after forward, no prefetch, no_sync", false, false, false, 2},
  };
  int failures = 0;
  ddp::TensorDict plain;
  for (const auto& v : variants) {
    const auto fsdp = train_fsdp(pg, v, kSteps);
    if (rank != 0) continue;
    const double diff = max_difference(fsdp, reference(kSteps, v.micro, pg->device()));
    std::printf("[%d ranks] %-40s max |fsdp - one process| = %.3g (tolerance %.0e)\n", pg->size(), v.name, diff,
                kTolerance);
    if (!(diff <= kTolerance)) ++failures;
    if (plain.empty()) plain = fsdp;
    if (v.checkpoint && v.micro == 1) {
      const double same = max_difference(fsdp, plain);
      std::printf("[%d ranks] checkpointing vs without: max difference %.3g\n", pg->size(), same);
      if (!(same <= 1e-6)) ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace fsdp_scenarios
