// defines: the mixed-precision scenarios — bf16 DDP against bf16 in one process, bf16 gradient
//          compression against float32, fp16 with an inf injected on one rank (DDP: in its batch;
//          ZeRO: in one gradient element, so that only the rank owning that slice finds it), ZeRO in
//          bf16 keeping float32 master state. They run on the group's device: the CPU suite
//          (test_mixed_precision.cpp) and the GPU suite (test_gpu_amp.cpp) share them. Models and
//          batches are made on the CPU from a seed, then moved, so every device starts alike.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "ddp/autocast.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/grad_scaler.h"
#include "ddp/process_group.h"
#include "ddp/sgd.h"
#include "ddp/sharded_adamw.h"
#include "ddp/zero_data_parallel.h"

namespace amp_scenarios {

constexpr int64_t kBatch = 24;  // divisible by 2 and 3: equal shards
constexpr int kSteps = 20;

// float32 (autocast lowers float32 ops only; float64 stays float64 under it).
struct Mlp32Impl : torch::nn::Module {
  Mlp32Impl() {
    l1 = register_module("l1", torch::nn::Linear(16, 64));
    l2 = register_module("l2", torch::nn::Linear(64, 64));
    l3 = register_module("l3", torch::nn::Linear(64, 64));
    l4 = register_module("l4", torch::nn::Linear(64, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return l4(torch::tanh(l3(torch::tanh(l2(torch::tanh(l1(x))))))); }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr}, l4{nullptr};
};

inline std::shared_ptr<Mlp32Impl> make_mlp32(uint64_t seed, const torch::Device& device) {
  torch::manual_seed(seed);
  auto model = std::make_shared<Mlp32Impl>();
  model->to(device);
  return model;
}

inline std::pair<torch::Tensor, torch::Tensor> batch32(int step, const torch::Device& device) {
  auto gen = at::detail::createCPUGenerator(2000 + step);
  auto x = torch::randn({kBatch, 16}, gen, torch::kFloat32);
  auto y = torch::randn({kBatch, 4}, gen, torch::kFloat32);
  return {x.to(device), y.to(device)};
}

inline torch::Tensor shard(const torch::Tensor& t, int rank, int world) {
  const int64_t per = t.size(0) / world;
  return t.narrow(0, rank * per, per);
}

inline double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i].to(torch::kFloat64) - b[i].to(torch::kFloat64)).abs().max().item<double>());
  return worst;
}

inline std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

inline bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// PyTorch's rule for the scale (GradScaler.update, _amp_update_scale_): x backoff at a step that
// found inf/NaN (and the growth count restarts), x growth after `interval` steps in a row without.
inline std::vector<double> pytorch_scale_sequence(double scale, double growth, double backoff, int64_t interval,
                                                  const std::vector<bool>& found) {
  std::vector<double> after;
  int64_t tracker = 0;
  for (bool f : found) {
    if (f) {
      scale *= backoff;
      tracker = 0;
    } else if (++tracker == interval) {
      scale *= growth;
      tracker = 0;
    }
    after.push_back(scale);
  }
  return after;
}

// bf16 autocast: N ranks of DDP against one process on the whole batch, both in bf16 (compress: the
// DDP buckets travel as bfloat16 too). Beside them, the same model trained by this rank alone on its
// shard (what DDP without communication would give) and in float32, for scale: the check is that
// |DDP - one process| <= tolerance and is less than a tenth of |alone - one process|, so that the
// tolerance tells averaged gradients from unaveraged ones.
inline int bf16_ddp_equals_one_process(int rank, std::shared_ptr<ddp::ProcessGroup> pg, bool compress,
                                       double tolerance) {
  const int world = pg->size();
  const torch::Device device = pg->device();
  auto model = make_mlp32(100 + rank, device), reference = make_mlp32(100, device), fp32 = make_mlp32(100, device),
       alone = make_mlp32(100, device);
  ddp::DdpOptions options;
  options.bucket_mb = 0.02;  // several buckets
  options.bf16_compress = compress;
  ddp::DistributedDataParallel<Mlp32Impl> ddp_model(model, pg, options);
  const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
  ddp::Sgd opt(model->parameters(), sgd), ref_opt(reference->parameters(), sgd), fp32_opt(fp32->parameters(), sgd),
      alone_opt(alone->parameters(), sgd);
  const ddp::AutocastOptions bf16{.device_type = device.type(), .dtype = torch::kBFloat16};
  for (int step = 0; step < kSteps; ++step) {
    for (auto* o : {&opt, &ref_opt, &fp32_opt, &alone_opt}) o->zero_grad();
    auto [x, y] = batch32(step, device);
    torch::Tensor loss, ref_loss, alone_loss;
    {
      ddp::Autocast amp(bf16);
      loss = torch::mse_loss(ddp_model->forward(shard(x, rank, world)), shard(y, rank, world));
      ref_loss = torch::mse_loss(reference->forward(x), y);
      alone_loss = torch::mse_loss(alone->forward(shard(x, rank, world)), shard(y, rank, world));
    }
    loss.backward();
    ref_loss.backward();
    alone_loss.backward();
    torch::mse_loss(fp32->forward(x), y).backward();
    for (auto* o : {&opt, &ref_opt, &fp32_opt, &alone_opt}) o->step();
  }
  const double diff = max_difference(model->parameters(), reference->parameters());
  const double bf16_cost = max_difference(reference->parameters(), fp32->parameters());
  const double unaveraged = max_difference(alone->parameters(), reference->parameters());
  std::printf(
      "rank %d of %d on %s, bf16%s: max |DDP - one process| = %.3g (tolerance %.3g); for scale: "
      "|this rank alone - one process| = %.3g, |bf16 - float32| in one process = %.3g, after %d steps\n",
      rank, world, device.str().c_str(), compress ? " with bf16 buckets" : "", diff, tolerance, unaveraged, bf16_cost,
      kSteps);
  return diff <= tolerance && diff * 10 < unaveraged ? 0 : 1;
}

// fp16 with a GradScaler attached to ddp::Sgd: the rank `poisoned_rank` puts an inf into its batch at
// the steps in `poisoned`. Every rank must skip exactly those steps (parameters and momentum
// unchanged), every rank's scale must follow PyTorch's rule, and the ranks must end equal.
inline int fp16_ddp_skips_on_every_rank(int rank, std::shared_ptr<ddp::ProcessGroup> pg, int poisoned_rank,
                                        const std::set<int>& poisoned) {
  const int world = pg->size();
  const torch::Device device = pg->device();
  auto model = make_mlp32(7, device);
  ddp::DdpOptions options;
  options.bucket_mb = 0.02;
  ddp::DistributedDataParallel<Mlp32Impl> ddp_model(model, pg, options);
  ddp::Sgd opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ddp::GradScalerOptions so;
  so.init_scale = 1024;    // with growth every 4 clean steps it stays below float16's overflow here: the
  so.growth_interval = 4;  // only skipped steps are the injected ones (PyTorch's 2^16 would add its own)
  auto scaler = std::make_shared<ddp::GradScaler>(device, so);
  opt.set_grad_scaler(scaler);
  const ddp::AutocastOptions fp16{.device_type = device.type(), .dtype = torch::kHalf};
  std::vector<bool> found, skipped;
  std::vector<double> scales;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    auto [x, y] = batch32(step, device);
    auto xs = shard(x, rank, world).clone();
    if (rank == poisoned_rank && poisoned.count(step)) xs.index_put_({0, 0}, std::numeric_limits<float>::infinity());
    torch::Tensor loss;
    {
      ddp::Autocast amp(fp16);
      loss = torch::mse_loss(ddp_model->forward(xs), shard(y, rank, world));
    }
    scaler->scale(loss).backward();
    const auto before = copies(model->parameters());
    opt.step();  // unscale_, the step unless found_inf, update: nothing read on the host
    found.push_back(poisoned.count(step) > 0);
    skipped.push_back(all_equal(before, model->parameters()));
    scales.push_back(scaler->get_scale());  // the test reads it; training does not
  }
  const auto expected =
      pytorch_scale_sequence(so.init_scale, so.growth_factor, so.backoff_factor, so.growth_interval, found);
  int bad = 0;
  for (int step = 0; step < kSteps; ++step) {
    if (skipped[step] != found[step]) {
      std::fprintf(stderr, "rank %d: step %d %s, but the inf was %s\n", rank, step,
                   skipped[step] ? "was skipped" : "changed the parameters",
                   found[step] ? ("injected there (on rank " + std::to_string(poisoned_rank) + ")").c_str() : "not");
      ++bad;
    }
    if (scales[step] != expected[step]) {
      std::fprintf(stderr, "rank %d: scale after step %d is %g, PyTorch's rule gives %g\n", rank, step, scales[step],
                   expected[step]);
      ++bad;
    }
  }
  // Every rank ends with rank 0's parameters, bit for bit.
  for (const auto& p : model->parameters()) {
    std::vector<torch::Tensor> mine{p.detach().clone()};
    pg->broadcast(mine, 0, "rank 0's parameters");
    if (!torch::equal(mine[0], p)) {
      std::fprintf(stderr, "rank %d: parameters differ from rank 0's\n", rank);
      ++bad;
      break;
    }
  }
  std::printf(
      "rank %d of %d on %s, fp16: skipped steps %s, final scale %g (PyTorch's rule: %g)\n", rank, world,
      device.str().c_str(),
      [&] {
        std::string s;
        for (int step = 0; step < kSteps; ++step)
          if (skipped[step]) s += (s.empty() ? "" : ",") + std::to_string(step);
        return s;
      }()
          .c_str(),
      scales.back(), expected.back());
  return bad == 0 ? 0 : 1;
}

// fp16 ZeRO (stage 1 or 2): the rank `poisoned_rank` adds inf x one weight to its loss at step
// `poisoned_step`, so that one gradient element is inf; after the reduce-scatter (stage 2) or in
// the unscaled slices (stage 1) only the rank that owns that element sees it. Every rank must skip
// the step (parameters, moments and Adam's applied-step count unchanged) and back off its scale.
inline int fp16_zero_skips_on_every_rank(int rank, std::shared_ptr<ddp::ProcessGroup> pg, int stage, int poisoned_rank,
                                         int poisoned_step) {
  const int world = pg->size();
  const torch::Device device = pg->device();
  auto net = make_mlp32(11, device);
  ddp::ZeroOptions zo;
  zo.stage = stage;
  zo.bucket_mb = 0.02;
  ddp::ZeroDataParallel<Mlp32Impl> model(net, pg, zo);
  ddp::ShardedAdamW opt(model, ddp::AdamOptions{1e-3, 0.9, 0.999, 1e-8, 0.01, true});
  auto scaler = std::make_shared<ddp::GradScaler>(device);
  opt.set_grad_scaler(scaler);
  const ddp::AutocastOptions fp16{.device_type = device.type(), .dtype = torch::kHalf};
  constexpr int kZeroSteps = 6;
  int bad = 0;
  for (int step = 0; step < kZeroSteps; ++step) {
    opt.zero_grad();
    auto [x, y] = batch32(step, device);
    torch::Tensor loss;
    {
      ddp::Autocast amp(fp16);
      loss = torch::mse_loss(model->forward(shard(x, rank, world)), shard(y, rank, world));
    }
    const bool poison = step == poisoned_step;
    if (rank == poisoned_rank && poison)
      loss = loss + net->l4->weight.index({0, 0}) * std::numeric_limits<float>::infinity();
    scaler->scale(loss).backward();
    // Which ranks hold an inf in their own slice of the gradients (a test's host read).
    bool mine = false;
    for (const auto& g : model.reducer()->gradient_shards()) mine = mine || !g.isfinite().all().item<bool>();
    auto holders = torch::tensor({mine ? 1.0f : 0.0f}).to(device);
    pg->allreduce_sum(holders, "which ranks found inf");
    const double scale_before = scaler->get_scale();
    const auto params = copies(opt.state().parameter_shards());
    const auto m = copies(opt.exp_avg_shards()), v = copies(opt.exp_avg_sq_shards());
    const double applied = opt.applied_steps().item<double>();
    opt.step();
    const bool unchanged = all_equal(params, opt.state().parameter_shards()) && all_equal(m, opt.exp_avg_shards()) &&
                           all_equal(v, opt.exp_avg_sq_shards()) && opt.applied_steps().item<double>() == applied;
    const double scale = scaler->get_scale();
    if (poison) {
      const int seen = static_cast<int>(holders.item<float>());
      std::printf(
          "rank %d of %d on %s, ZeRO-%d fp16, step %d: inf in %d rank's gradient slice (this one: %s); "
          "step %s, scale %g -> %g\n",
          rank, world, device.str().c_str(), stage, step, seen, mine ? "yes" : "no", unchanged ? "skipped" : "APPLIED",
          scale_before, scale);
      if (seen != 1) {
        std::fprintf(stderr, "rank %d: expected the inf in exactly one rank's slice, found it in %d\n", rank, seen);
        ++bad;
      }
      if (!unchanged || scale != scale_before * 0.5) ++bad;
    } else if (unchanged || scale != scale_before) {
      std::fprintf(stderr, "rank %d: step %d %s, scale %g -> %g\n", rank, step,
                   unchanged ? "was skipped without an inf" : "changed the scale", scale_before, scale);
      ++bad;
    }
  }
  return bad == 0 ? 0 : 1;
}

// ZeRO-2 in bf16: parameters, buckets, gradient slices and Adam's moments stay float32.
inline int bf16_zero_keeps_fp32_master_state(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  const int world = pg->size();
  const torch::Device device = pg->device();
  auto net = make_mlp32(13, device);
  ddp::ZeroOptions zo;
  zo.stage = 2;
  zo.bucket_mb = 0.02;
  ddp::ZeroDataParallel<Mlp32Impl> model(net, pg, zo);
  ddp::ShardedAdamW opt(model, ddp::AdamOptions{1e-3, 0.9, 0.999, 1e-8, 0.0, true});
  const auto start = copies(net->parameters());
  const ddp::AutocastOptions bf16{.device_type = device.type(), .dtype = torch::kBFloat16};
  torch::Tensor out;
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    auto [x, y] = batch32(step, device);
    torch::Tensor loss;
    {
      ddp::Autocast amp(bf16);
      out = model->forward(shard(x, rank, world));
      loss = torch::mse_loss(out, shard(y, rank, world));
    }
    loss.backward();
    opt.step();
  }
  int bad = 0;
  auto expect_fp32 = [&](const torch::Tensor& t, const std::string& what) {
    if (t.scalar_type() != torch::kFloat32) {
      std::fprintf(stderr, "rank %d: %s is %s, not float32\n", rank, what.c_str(), c10::toString(t.scalar_type()));
      ++bad;
    }
  };
  if (out.scalar_type() != torch::kBFloat16) {
    std::fprintf(stderr, "rank %d: the forward under autocast gave %s, not bfloat16\n", rank,
                 c10::toString(out.scalar_type()));
    ++bad;
  }
  for (const auto& p : net->parameters()) expect_fp32(p, "a parameter");
  for (const auto& b : model.reducer()->buckets()) expect_fp32(b.params, "a flat parameter bucket");
  for (const auto& g : model.reducer()->gradient_shards()) expect_fp32(g, "a gradient slice");
  for (const auto& m : opt.exp_avg_shards()) expect_fp32(m, "Adam's exp_avg slice");
  for (const auto& v : opt.exp_avg_sq_shards()) expect_fp32(v, "Adam's exp_avg_sq slice");
  if (all_equal(start, net->parameters())) {
    std::fprintf(stderr, "rank %d: bf16 training did not move the parameters\n", rank);
    ++bad;
  }
  std::printf(
      "rank %d of %d on %s, ZeRO-2 bf16: forward in %s; parameters, buckets, gradient slices and Adam's "
      "moments float32\n",
      rank, world, device.str().c_str(), c10::toString(out.scalar_type()));
  return bad == 0 ? 0 : 1;
}

}  // namespace amp_scenarios
