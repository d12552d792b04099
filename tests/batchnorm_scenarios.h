// defines: the SyncBatchNorm scenarios — N ranks, each with its own batch (uneven sizes, an empty one
//          included), run ddp::SyncBatchNorm for a few steps (forward, backward of sum(y * dy)) and
//          then evaluate; what they must get is batch norm over the concatenation of every rank's
//          batch. That reference comes from LibTorch's torch::nn::BatchNorm on one process
//          (reference(), no communication), from Python's BatchNorm, or from Python's real
//          torch.nn.SyncBatchNorm on CUDA (tests/python/sync_batchnorm_reference.py): all three
//          share these inputs and keys. Used by test_sync_batch_norm.cpp (CPU),
//          test_batchnorm_python.cpp (Python) and test_gpu_batchnorm.cpp (CUDA).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.h"
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "ddp/sync_batch_norm.h"
#include "ddp/torch_pickle.h"
#include "ddp/weights_io.h"

namespace bn_scenarios {

struct Config {
  std::string name;
  std::vector<int64_t> sizes;      // each rank's batch size (the world is sizes.size())
  std::vector<int64_t> sample;     // one sample's shape: {C, spatial...}
  std::optional<double> momentum;  // none: cumulative average (num_batches_tracked)
  bool affine = true;
  torch::Dtype dtype = torch::kFloat64;
  int steps = 2;
  double tolerance = 1e-10;
};

// 2 and 3 ranks, uneven, an empty batch and a batch of one; 1-D, 2-D and 3-D batch norm; float64 and
// float32; momentum set and unset; with and without affine parameters.
inline std::vector<Config> configs() {
  return {
      {"2 ranks, [N,4,3,3], batches 5+3, float64", {5, 3}, {4, 3, 3}, 0.1, true, torch::kFloat64, 2, 1e-10},
      {"3 ranks, [N,6], batches 4+0+7, cumulative, float32",
       {4, 0, 7},
       {6},
       std::nullopt,
       true,
       torch::kFloat32,
       3,
       2e-5},
      {"2 ranks, [N,3,2,2,2], batches 1+2, no affine, float32",
       {1, 2},
       {3, 2, 2, 2},
       0.3,
       false,
       torch::kFloat32,
       2,
       2e-5},
      {"3 ranks, [N,5,4], batches 2+6+3, float64", {2, 6, 3}, {5, 4}, 0.1, true, torch::kFloat64, 2, 1e-10},
  };
}

inline torch::Tensor at(const ddp::TensorDict& dict, const std::string& key) {
  for (const auto& [k, t] : dict)
    if (k == key) return t;
  throw ddp::Error("no tensor '" + key + "' in the scenario's file", "the writer and the reader disagree on keys");
}

inline std::vector<int64_t> shape_of(const Config& c, int64_t n) {
  std::vector<int64_t> s{n};
  s.insert(s.end(), c.sample.begin(), c.sample.end());
  return s;
}

// The inputs every side reads (CPU tensors): batches per step and rank, offset per rank so that the
// ranks' statistics differ; the layer's starting state; momentum (negative: none) and affine.
inline ddp::TensorDict make_inputs(const Config& c) {
  auto gen = at::detail::createCPUGenerator(4242);
  auto opts = torch::TensorOptions().dtype(c.dtype);
  ddp::TensorDict in;
  const int64_t channels = c.sample[0];
  for (int s = 0; s < c.steps; ++s)
    for (size_t r = 0; r < c.sizes.size(); ++r) {
      const double offset = 0.7 * static_cast<double>(r) - 0.5;
      in.emplace_back("x." + std::to_string(s) + "." + std::to_string(r),
                      torch::randn(shape_of(c, c.sizes[r]), gen, opts) * (1.0 + 0.5 * static_cast<double>(r)) + offset);
      in.emplace_back("dy." + std::to_string(s) + "." + std::to_string(r),
                      torch::randn(shape_of(c, c.sizes[r]), gen, opts));
    }
  for (size_t r = 0; r < c.sizes.size(); ++r)
    in.emplace_back("eval." + std::to_string(r), torch::randn(shape_of(c, 3), gen, opts));
  in.emplace_back("weight", torch::rand({channels}, gen, opts) + 0.5);
  in.emplace_back("bias", torch::randn({channels}, gen, opts));
  in.emplace_back("running_mean", torch::randn({channels}, gen, opts) * 0.1);
  in.emplace_back("running_var", torch::rand({channels}, gen, opts) + 0.5);
  in.emplace_back("momentum", torch::tensor(c.momentum.value_or(-1.0), torch::kFloat64));
  in.emplace_back("affine", torch::tensor(c.affine ? 1 : 0, torch::kInt64));
  return in;
}

inline torch::nn::BatchNormOptions layer_options(const Config& c) {
  return torch::nn::BatchNormOptions(c.sample[0]).momentum(c.momentum).affine(c.affine);
}

// Copies the inputs' starting state into a layer (a torch::nn::BatchNorm or a SyncBatchNorm).
template <typename Layer>
void load_start(Layer& layer, const ddp::TensorDict& in, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  for (const auto& item : layer.named_parameters(/*recurse=*/false)) item.value().copy_(at(in, item.key()).to(device));
  for (const auto& item : layer.named_buffers(/*recurse=*/false))
    if (item.key() != "num_batches_tracked") item.value().copy_(at(in, item.key()).to(device));
}

// LibTorch's BatchNorm over the concatenation, on one process: the C++ reference (same keys as
// sync_batchnorm_reference.py's "batchnorm" mode).
inline ddp::TensorDict reference(const Config& c, const ddp::TensorDict& in) {
  const int world = static_cast<int>(c.sizes.size());
  std::shared_ptr<torch::nn::Module> layer;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  const auto opt = layer_options(c);
  const size_t dims = c.sample.size() + 1;
  if (dims <= 3) {
    auto bn = std::make_shared<torch::nn::BatchNorm1dImpl>(opt);
    layer = bn;
    forward = [bn](const torch::Tensor& x) { return bn->forward(x); };
  } else if (dims == 4) {
    auto bn = std::make_shared<torch::nn::BatchNorm2dImpl>(opt);
    layer = bn;
    forward = [bn](const torch::Tensor& x) { return bn->forward(x); };
  } else {
    auto bn = std::make_shared<torch::nn::BatchNorm3dImpl>(opt);
    layer = bn;
    forward = [bn](const torch::Tensor& x) { return bn->forward(x); };
  }
  layer->to(c.dtype);
  load_start(*layer, in, torch::kCPU);
  ddp::TensorDict out;
  for (int s = 0; s < c.steps; ++s) {
    std::vector<torch::Tensor> parts, dys;
    for (int r = 0; r < world; ++r) {
      parts.push_back(at(in, "x." + std::to_string(s) + "." + std::to_string(r)));
      dys.push_back(at(in, "dy." + std::to_string(s) + "." + std::to_string(r)));
    }
    auto x = torch::cat(parts).requires_grad_(true);
    auto y = forward(x);
    (y * torch::cat(dys)).sum().backward();
    int64_t start = 0;
    for (int r = 0; r < world; ++r) {
      const int64_t n = parts[static_cast<size_t>(r)].size(0);
      out.emplace_back("y." + std::to_string(s) + "." + std::to_string(r), y.narrow(0, start, n).detach().clone());
      out.emplace_back("gx." + std::to_string(s) + "." + std::to_string(r), x.grad().narrow(0, start, n).clone());
      start += n;
    }
    if (c.affine) {
      for (auto& item : layer->named_parameters(false)) {
        out.emplace_back((item.key() == "weight" ? "gw." : "gb.") + std::to_string(s), item.value().grad().clone());
        item.value().mutable_grad() = torch::Tensor();
      }
    }
  }
  for (const auto& item : layer->named_buffers(false)) out.emplace_back(item.key(), item.value().clone());
  layer->eval();
  torch::NoGradGuard no_grad;
  for (int r = 0; r < world; ++r)
    out.emplace_back("eval." + std::to_string(r), forward(at(in, "eval." + std::to_string(r))));
  return out;
}

// The largest |a - b| (0 for two empty tensors); a shape difference is an error.
inline double difference(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  DDP_CHECK(a.sizes() == b.sizes(), what + ": shapes differ, " + c10::str(a.sizes()) + " vs " + c10::str(b.sizes()),
            "");
  if (a.numel() == 0) return 0;
  return (a.to(torch::kCPU, torch::kFloat64) - b.to(torch::kCPU, torch::kFloat64)).abs().max().item<double>();
}

// Rank `rank` runs ddp::SyncBatchNorm on `device` over `pg` and compares everything with
// `expected`. global_grads: the expected weight and bias gradients are all ranks' together (batch
// norm over the concatenation), so the local ones are summed over the ranks first (with the
// group's own allreduce); otherwise they are this rank's (Python's SyncBatchNorm). Returns 0 when
// everything is within the configuration's tolerance; prints the largest difference of each kind.
inline int run_rank(const Config& c, int rank, const std::shared_ptr<ddp::ProcessGroup>& pg, const ddp::TensorDict& in,
                    const ddp::TensorDict& expected, bool global_grads) {
  const torch::Device device = pg->device();
  ddp::SyncBatchNorm layer(layer_options(c), pg);
  layer->to(device, c.dtype);
  load_start(*layer, in, device);
  double worst_y = 0, worst_gx = 0, worst_gw = 0, worst_stats = 0, worst_eval = 0;
  const std::string r = std::to_string(rank);
  for (int s = 0; s < c.steps; ++s) {
    const std::string sr = std::to_string(s) + "." + r;
    auto x = at(in, "x." + sr).to(device).requires_grad_(true);
    auto y = layer(x);
    (y * at(in, "dy." + sr).to(device)).sum().backward();
    worst_y = std::max(worst_y, difference(y.detach(), at(expected, "y." + sr), "output y." + sr));
    worst_gx = std::max(worst_gx, difference(x.grad(), at(expected, "gx." + sr), "input gradient gx." + sr));
    if (c.affine) {
      for (auto* p : {&layer->weight, &layer->bias}) {
        auto g = p->grad().clone();
        if (global_grads) pg->allreduce_sum(g, "test: sum of the local weight gradients");
        const std::string key = (p == &layer->weight ? "gw." : "gb.") + std::to_string(s);
        worst_gw = std::max(worst_gw, difference(g, at(expected, key), key));
        p->mutable_grad() = torch::Tensor();
      }
    }
  }
  for (const auto& item : layer->named_buffers(false))
    worst_stats = std::max(worst_stats, difference(item.value(), at(expected, item.key()), item.key()));
  layer->eval();
  {
    torch::NoGradGuard no_grad;
    worst_eval = difference(layer(at(in, "eval." + r).to(device)), at(expected, "eval." + r), "eval." + r);
  }
  const double worst = std::max({worst_y, worst_gx, worst_gw, worst_stats, worst_eval});
  std::printf(
      "[rank %d] %s: max |diff| y %.3g, grad x %.3g, grad w/b %.3g, running stats %.3g, eval %.3g (tolerance %g)\n",
      rank, c.name.c_str(), worst_y, worst_gx, worst_gw, worst_stats, worst_eval, c.tolerance);
  return worst <= c.tolerance ? 0 : 1;
}

// ---- DistributedDataParallel over a converted model == one process on the whole batch ----------

inline torch::nn::Sequential make_net(uint64_t seed, const torch::Device& device) {
  torch::manual_seed(seed);
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 3)), torch::nn::BatchNorm2d(4),
                            torch::nn::ReLU(), torch::nn::Flatten(), torch::nn::Linear(4 * 4 * 4, 3),
                            torch::nn::BatchNorm1d(3));
  net->to(device, torch::kFloat64);
  return net;
}

// Rank r trains a Sequential whose two BatchNorm layers convert_sync_batchnorm made SyncBatchNorm,
// under DistributedDataParallel, on its part of each batch (`sizes`: uneven); each rank also trains
// the unconverted model on the whole batch, alone. Each rank's loss is its share of the whole
// batch's mean squared error times the world size (DDP averages the ranks' gradients): the average
// is then the whole batch's gradient, with uneven parts too, since SyncBatchNorm's backward carries
// every rank's part. After 6 SGD steps (momentum 0.9) parameters and buffers must agree (float64).
inline int train_with_sync_batchnorm(int rank, std::shared_ptr<ddp::ProcessGroup> pg,
                                     const std::vector<int64_t>& sizes) {
  const torch::Device device = pg->device();
  const int world = pg->size();
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  const int64_t start = std::accumulate(sizes.begin(), sizes.begin() + rank, int64_t{0});
  const int64_t mine = sizes[static_cast<size_t>(rank)];
  auto net = make_net(7 + static_cast<uint64_t>(rank), device);  // different weights: DDP broadcasts rank 0's
  auto reference = make_net(7, device);
  const size_t converted = ddp::convert_sync_batchnorm(*net, pg);
  if (converted != 2) {
    std::fprintf(stderr, "converted %zu BatchNorm layers, expected 2\n", converted);
    return 1;
  }
  ddp::DistributedDataParallel<torch::nn::SequentialImpl> model(net.ptr(), pg);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto gen = at::detail::createCPUGenerator(99);
  for (int step = 0; step < 6; ++step) {
    auto x = (torch::randn({total, 2, 6, 6}, gen, torch::kFloat64) * 2 + 1).to(device);
    auto y = torch::randn({total, 3}, gen, torch::kFloat64).to(device);
    opt.zero_grad();
    auto out = model(x.narrow(0, start, mine));
    auto share = torch::mse_loss(out, y.narrow(0, start, mine), torch::Reduction::Sum) /
                 (3.0 * static_cast<double>(total)) * world;
    share.backward();
    opt.step();
    ref_opt.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    ref_opt.step();
  }
  double worst = 0;
  const auto a = ddp::state_dict(*net), b = ddp::state_dict(*reference);
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, difference(a[i].second, b[i].second, a[i].first));
  std::printf(
      "[rank %d] DDP + SyncBatchNorm, batches of %s, 6 steps: max |diff| to one process %.3g (tolerance 1e-9)\n", rank,
      c10::str(sizes).c_str(), worst);
  return worst <= 1e-9 ? 0 : 1;
}

}  // namespace bn_scenarios
