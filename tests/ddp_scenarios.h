// defines: the DDP equivalence scenarios — N ranks training on shards of each batch end with the
//          parameters of one process training on the whole batch (float64, several buckets,
//          no_sync, gradients zeroed in place, unused parameters). Each rank computes the
//          single-process reference itself, without communication, so the comparison does not
//          depend on the code under test. They run on the group's device: the CPU suite
//          (test_ddp_equivalence.cpp) and the GPU suite (test_gpu.cpp, CUDA tensors) share them.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "ddp/distributed_data_parallel.h"
#include "ddp/process_group.h"

namespace ddp_scenarios {

constexpr int64_t kBatch = 24;  // divisible by 2 and 3: equal shards
constexpr int kSteps = 25;
constexpr double kTolerance = 1e-9;  // float64; the bound is 1e-6

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(bool with_unused = false) {
    l1 = register_module("l1", torch::nn::Linear(16, 64));
    l2 = register_module("l2", torch::nn::Linear(64, 64));
    l3 = register_module("l3", torch::nn::Linear(64, 64));
    l4 = register_module("l4", torch::nn::Linear(64, 4));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(4, 4));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return l4(torch::tanh(l3(torch::tanh(l2(torch::tanh(l1(x))))))); }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr}, l4{nullptr}, unused{nullptr};
};

// Weights from `seed` (made on the CPU, the same on every device), then moved to `device`.
inline std::shared_ptr<MlpImpl> make_mlp(uint64_t seed, bool with_unused = false,
                                         const torch::Device& device = torch::kCPU) {
  torch::manual_seed(seed);
  auto model = std::make_shared<MlpImpl>(with_unused);
  model->to(device);
  return model;
}

inline double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

// The batch of a step: identical on every rank, and in the reference.
inline std::pair<torch::Tensor, torch::Tensor> batch(int step, const torch::Device& device = torch::kCPU) {
  auto gen = at::detail::createCPUGenerator(1000 + step);
  auto x = torch::randn({kBatch, 16}, gen, torch::kFloat64);
  auto y = torch::randn({kBatch, 4}, gen, torch::kFloat64);
  return {x.to(device), y.to(device)};
}

inline torch::Tensor shard(const torch::Tensor& t, int rank, int world) {
  const int64_t per = t.size(0) / world;
  return t.narrow(0, rank * per, per);
}

// micro_batches > 1: the first ones run under no_sync(), gradients accumulate, one sync at the end.
// grads_to_none = false: zero_grad() zeroes .grad in place, and .grad lives in DDP's buckets.
inline int train_and_compare(int rank, std::shared_ptr<ddp::ProcessGroup> pg, int micro_batches,
                             bool grads_to_none = true, double tolerance = kTolerance) {
  const int world = pg->size();
  const torch::Device device = pg->device();
  auto model = make_mlp(100 + rank, false, device);  // every rank starts from different weights...
  auto reference = make_mlp(100, false, device);     // ...the wrap must give them rank 0's
  ddp::DdpOptions options;
  options.bucket_mb = 0.02;  // ~20 KB: the 64x64 layers land in different buckets
  ddp::DistributedDataParallel<MlpImpl> ddp_model(model, pg, options);
  if (ddp_model.bucket_count() < 3) {
    std::fprintf(stderr, "expected several buckets, got %zu\n", ddp_model.bucket_count());
    return 1;
  }
  if (max_difference(*model, *reference) != 0) {
    std::fprintf(stderr, "rank %d: weights differ from rank 0's after the wrap\n", rank);
    return 1;
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad(grads_to_none);
    ref_opt.zero_grad(grads_to_none);
    for (int m = 0; m < micro_batches; ++m) {
      auto [x, y] = batch(step * micro_batches + m, device);
      auto local_loss = [&] {
        return torch::mse_loss(ddp_model->forward(shard(x, rank, world)), shard(y, rank, world));
      };
      if (m + 1 < micro_batches) {
        auto no_sync = ddp_model.no_sync();  // accumulate only
        local_loss().backward();
      } else {
        local_loss().backward();  // averages everything accumulated so far
      }
      torch::mse_loss(reference->forward(x), y).backward();
    }
    opt.step();
    ref_opt.step();
  }
  const double diff = max_difference(*model, *reference);
  std::printf("rank %d of %d on %s, %d micro-batch(es): max |DDP - single process| = %.3g after %d steps\n", rank,
              world, device.str().c_str(), micro_batches, diff, kSteps);
  return diff <= tolerance ? 0 : 1;
}

// A model with a branch that only some ranks use in some passes, and a layer nobody uses.
struct BranchyImpl : torch::nn::Module {
  BranchyImpl() {
    l1 = register_module("l1", torch::nn::Linear(16, 32));
    l2 = register_module("l2", torch::nn::Linear(32, 32));
    branch = register_module("branch", torch::nn::Linear(32, 32));
    head = register_module("head", torch::nn::Linear(32, 4));
    never = register_module("never", torch::nn::Linear(4, 4));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_branch) {
    auto h = torch::tanh(l2(torch::tanh(l1(x))));
    if (use_branch) h = h + torch::tanh(branch(h));
    return head(h);
  }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, branch{nullptr}, head{nullptr}, never{nullptr};
};

// Which ranks use the branch in which pass: in some steps only in a no_sync pass on one rank (its
// accumulated gradient must still count), in some steps on no rank at all (.grad stays undefined).
inline bool uses_branch(int step, int micro_batch, int rank) { return (step + micro_batch + rank) % 4 == 0; }

// find_unused_parameters on 2 ranks, with no_sync passes and a layer no rank uses.
inline int find_unused_equals_one_process(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  constexpr int kWorld = 2, kMicro = 2, kUnusedSteps = 12;
  const torch::Device device = pg->device();
  torch::manual_seed(3);
  auto model = std::make_shared<BranchyImpl>();
  torch::manual_seed(3);
  auto reference = std::make_shared<BranchyImpl>();
  model->to(device);
  reference->to(device);
  const auto never_before = model->never->weight.detach().clone();
  ddp::DdpOptions options;
  options.find_unused_parameters = true;
  options.bucket_mb = 0.01;  // several buckets
  ddp::DistributedDataParallel<BranchyImpl> ddp_model(model, pg, options);
  auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01);
  torch::optim::SGD opt(model->parameters(), sgd), ref_opt(reference->parameters(), sgd);
  for (int step = 0; step < kUnusedSteps; ++step) {
    opt.zero_grad();
    ref_opt.zero_grad();
    for (int m = 0; m < kMicro; ++m) {
      auto [x, y] = batch(step * kMicro + m, device);
      auto loss = [&](int r, auto& net) {
        return torch::mse_loss(net->forward(shard(x, r, kWorld), uses_branch(step, m, r)), shard(y, r, kWorld));
      };
      if (m + 1 < kMicro) {
        auto no_sync = ddp_model.no_sync();
        loss(rank, ddp_model).backward();
      } else {
        loss(rank, ddp_model).backward();
      }
      // The reference: the mean over both ranks' shards, in one process.
      ((loss(0, reference) + loss(1, reference)) / kWorld).backward();
    }
    if (model->never->weight.grad().defined()) {
      std::fprintf(stderr, "rank %d: a layer no rank used got a gradient\n", rank);
      return 1;
    }
    opt.step();
    ref_opt.step();
  }
  const double diff = max_difference(*model, *reference);
  const bool never_moved = !torch::equal(model->never->weight, never_before);
  std::printf("rank %d on %s: find_unused_parameters, max |DDP - single process| = %.3g\n", rank, device.str().c_str(),
              diff);
  if (never_moved) std::fprintf(stderr, "rank %d: the unused layer moved\n", rank);
  return diff <= kTolerance && !never_moved ? 0 : 1;
}

}  // namespace ddp_scenarios
