// defines: the ZeRO equivalence scenarios — ZeRO-1 and ZeRO-2 (ddp::ZeroDataParallel +
//          ddp::ShardedAdamW) train side by side with plain DDP and LibTorch's own
//          torch::optim::AdamW on the same shards of each batch (float64, several buckets whose sizes
//          do not divide by N, clipping by the global norm, no_sync accumulation) and end within 1e-9,
//          each rank's slice of Adam's moments equal to the same slice of the DDP optimizer's state;
//          one rank equals LibTorch's AdamW. Models and batches are made on the CPU from the seed
//          (ddp_scenarios.h), then moved to the group's device: the CPU suite
//          (test_zero_equivalence.cpp) and the GPU suite (test_gpu_zero.cpp, CUDA tensors) share them.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "ddp/distributed_data_parallel.h"
#include "ddp/process_group.h"
#include "ddp/sharded_adamw.h"
#include "ddp/zero_data_parallel.h"
#include "ddp_scenarios.h"  // MlpImpl, make_mlp, batch, shard, max_difference

namespace zero_scenarios {

using ddp_scenarios::batch;
using ddp_scenarios::make_mlp;
using ddp_scenarios::max_difference;
using ddp_scenarios::MlpImpl;
using ddp_scenarios::shard;

constexpr int kSteps = 15;
constexpr double kTolerance = 1e-9;  // float64; the bound
constexpr double kClip = 0.05;       // below the gradient norm of most steps here: clipping happens

// The seed's Adam settings (ds_config.json), with a weight decay large enough to matter.
inline const ddp::AdamOptions kAdam{2e-3, 0.8, 0.999, 1e-8, 0.01, true};

inline torch::optim::AdamWOptions libtorch_adamw() {
  return torch::optim::AdamWOptions(kAdam.lr)
      .betas({kAdam.beta1, kAdam.beta2})
      .eps(kAdam.eps)
      .weight_decay(kAdam.weight_decay);
}

// This rank's slice of bucket k of a DDP optimizer's moment, cut as ZeRO cuts its buckets.
inline torch::Tensor reference_slice(const ddp::ZeroBucket& b, int rank, const std::vector<torch::Tensor>& ddp_params,
                                     torch::optim::AdamW& ref, bool second_moment) {
  auto flat = torch::zeros({b.padded_numel}, b.params.options());
  for (size_t s = 0; s < b.plan.params.size(); ++s) {
    const auto& p = ddp_params[b.plan.params[s]];
    auto& state = static_cast<torch::optim::AdamWParamState&>(*ref.state().at(p.unsafeGetTensorImpl()));
    flat.narrow(0, b.plan.offsets[s], p.numel())
        .copy_((second_moment ? state.exp_avg_sq() : state.exp_avg()).reshape({-1}));
  }
  return flat.narrow(0, rank * b.shard_numel, b.shard_numel);
}

struct Variant {
  int stage = 1;
  int micro_batches = 1;  // > 1: all but the last under no_sync()
  double clip = 0;        // > 0: clip by the global norm before each step
  bool grads_to_none = true;
  bool no_sync = true;  // false: every micro-batch's backward communicates, and the results add up
};

inline int zero_equals_ddp(int rank, std::shared_ptr<ddp::ProcessGroup> pg, Variant v) {
  const int world = pg->size();
  const torch::Device device = pg->device();
  // Rank 0 starts both models from the same weights; the other ranks from others (the wraps must fix it).
  const uint64_t seed = rank == 0 ? 100 : 100 + 17 * rank;
  auto zero_net = make_mlp(seed, false, device), ddp_net = make_mlp(seed, false, device);
  const auto rank0_start = make_mlp(100, false, device);
  ddp::ZeroOptions zo;
  zo.stage = v.stage;
  zo.bucket_mb = 0.02;  // ~20 KB: the 64x64 layers land in different buckets
  ddp::ZeroDataParallel<MlpImpl> zero(zero_net, pg, zo);
  ddp::DdpOptions dopt;
  dopt.bucket_mb = 0.02;
  ddp::DistributedDataParallel<MlpImpl> ddp_model(ddp_net, pg, dopt);
  if (zero.bucket_count() < 3) {
    std::fprintf(stderr, "expected several buckets, got %zu\n", zero.bucket_count());
    return 1;
  }
  bool padded = false;
  for (const auto& b : zero.reducer()->buckets()) padded |= b.padded_numel != b.plan.numel;
  if (world == 3 && !padded) {
    std::fprintf(stderr, "expected a bucket that needs padding with 3 ranks\n");
    return 1;
  }
  for (const auto& b : zero.reducer()->buckets())
    if (b.params.device() != device || b.grad_shard.defined() != (v.stage == 2) ||
        (b.grad_shard.defined() && b.grad_shard.device() != device)) {
      std::fprintf(stderr, "rank %d: a bucket's buffers are not on %s\n", rank, device.str().c_str());
      return 1;
    }
  if (max_difference(*zero_net, *ddp_net) != 0 || max_difference(*zero_net, *rank0_start) != 0) {
    std::fprintf(stderr, "rank %d: the wraps did not give every rank rank 0's weights\n", rank);
    return 1;
  }
  ddp::ShardedAdamW optimizer(zero, kAdam);
  torch::optim::AdamW reference(ddp_net->parameters(), libtorch_adamw());
  int clipped_steps = 0;
  double worst_norm_difference = 0;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad(v.grads_to_none);
    reference.zero_grad(v.grads_to_none);
    for (int m = 0; m < v.micro_batches; ++m) {
      auto [x, y] = batch(step * v.micro_batches + m, device);
      const auto xs = shard(x, rank, world), ys = shard(y, rank, world);
      if (m + 1 < v.micro_batches && v.no_sync) {
        auto a = zero.no_sync();
        auto b = ddp_model.no_sync();
        torch::mse_loss(zero->forward(xs), ys).backward();
        torch::mse_loss(ddp_model->forward(xs), ys).backward();
      } else {
        torch::mse_loss(zero->forward(xs), ys).backward();
        torch::mse_loss(ddp_model->forward(xs), ys).backward();
      }
    }
    if (v.stage == 2 && zero_net->l1->weight.grad().defined()) {
      std::fprintf(stderr, "rank %d: ZeRO-2 kept a full gradient after backward\n", rank);
      return 1;
    }
    if (v.clip > 0) {
      const double mine = optimizer.clip_grad_norm(v.clip);
      const double theirs = torch::nn::utils::clip_grad_norm_(ddp_net->parameters(), v.clip);
      worst_norm_difference = std::max(worst_norm_difference, std::abs(mine - theirs) / theirs);
      clipped_steps += theirs > v.clip;
    }
    optimizer.step();
    reference.step();
  }
  const double diff = max_difference(*zero_net, *ddp_net);
  double moment_diff = 0;
  const auto& buckets = zero.reducer()->buckets();
  const auto params = ddp_net->parameters();
  for (size_t k = 0; k < buckets.size(); ++k) {
    for (const bool second : {false, true}) {
      const auto& mine = second ? optimizer.exp_avg_sq_shards()[k] : optimizer.exp_avg_shards()[k];
      if (mine.device() != device) {
        std::fprintf(stderr, "rank %d: Adam's moments are on %s\n", rank, mine.device().str().c_str());
        return 1;
      }
      moment_diff =
          std::max(moment_diff,
                   (mine - reference_slice(buckets[k], rank, params, reference, second)).abs().max().item<double>());
    }
  }
  std::printf(
      "rank %d of %d on %s, ZeRO-%d, %d micro-batch(es), clip %g: max |ZeRO - DDP| = %.3g (moments %.3g) after %d "
      "steps; clipped in %d steps, norms differ by %.3g (relative)\n",
      rank, world, device.str().c_str(), v.stage, v.micro_batches, v.clip, diff, moment_diff, kSteps, clipped_steps,
      worst_norm_difference);
  bool ok = diff <= kTolerance && moment_diff <= kTolerance && worst_norm_difference <= 1e-12;
  if (v.clip > 0 && clipped_steps < kSteps / 2) {
    std::fprintf(stderr, "rank %d: clipping happened in only %d of %d steps: the test would prove little\n", rank,
                 clipped_steps, kSteps);
    ok = false;
  }
  if (max_difference(*zero_net, *rank0_start) < 1e-3) {
    std::fprintf(stderr, "rank %d: the parameters hardly moved\n", rank);
    ok = false;
  }
  return ok ? 0 : 1;
}

// One rank, ZeRO-2: ShardedAdamW equals LibTorch's AdamW on the whole model (with clip > 0 both clip
// by the global norm first; on one rank the norm's allreduce still runs, alone).
inline int one_rank_equals_libtorch_adamw(std::shared_ptr<ddp::ProcessGroup> pg, double clip = 0) {
  const torch::Device device = pg->device();
  auto net = make_mlp(9, false, device), reference = make_mlp(9, false, device);
  ddp::ZeroDataParallel<MlpImpl> zero(net, pg, {2, 0.02, true});
  ddp::ShardedAdamW optimizer(zero, kAdam);
  torch::optim::AdamW ref(reference->parameters(), libtorch_adamw());
  int clipped_steps = 0;
  for (int step = 0; step < 10; ++step) {
    auto [x, y] = batch(step, device);
    optimizer.zero_grad();
    ref.zero_grad();
    torch::mse_loss(zero->forward(x), y).backward();
    torch::mse_loss(reference->forward(x), y).backward();
    if (clip > 0) {
      optimizer.clip_grad_norm(clip);
      clipped_steps += torch::nn::utils::clip_grad_norm_(reference->parameters(), clip) > clip;
    }
    optimizer.step();
    ref.step();
  }
  const double diff = max_difference(*net, *reference);
  const double moved = max_difference(*net, *make_mlp(9, false, device));
  std::printf("one rank on %s (%s), clip %g: max |ZeRO-2 - AdamW| = %.3g; clipped in %d steps; moved by %.3g\n",
              device.str().c_str(), pg->backend_name().c_str(), clip, diff, clipped_steps, moved);
  const bool clipping_ok = clip <= 0 || clipped_steps >= 5;
  return diff <= kTolerance && moved >= 1e-3 && clipping_ok && net->l1->weight.device() == device ? 0 : 1;
}

}  // namespace zero_scenarios
