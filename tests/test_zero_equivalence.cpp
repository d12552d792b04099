// ZeRO-1 and ZeRO-2 (ddp::ZeroDataParallel + ddp::ShardedAdamW) are proven equal to plain DDP with
// LibTorch's own torch::optim::AdamW: N ranks (separate processes, Gloo) train both side by side on
// the same shards of each batch, a float64 model in several buckets whose sizes do not divide by N
// (padding, parameters cut between ranks). After 15 steps the parameters agree within 1e-9, and
// each rank's slice of Adam's moments equals the same slice of the DDP optimizer's state. Also with
// gradient clipping by the global norm (compared with torch::nn::utils::clip_grad_norm_ at every
// step, and clipping must really happen) and with no_sync() gradient accumulation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "ddp/distributed_data_parallel.h"
#include "ddp/sharded_adamw.h"
#include "ddp/zero_data_parallel.h"
#include "multiprocess.h"

// A named namespace, not an anonymous one: the test files are compiled in batches (unity build).
namespace zero_equivalence {

constexpr int64_t kBatch = 24;  // divisible by 2 and 3: equal shards
constexpr int kSteps = 15;
constexpr double kTolerance = 1e-9;  // float64; the bound

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

std::shared_ptr<MlpImpl> make_mlp(uint64_t seed, bool with_unused = false) {
  torch::manual_seed(seed);
  return std::make_shared<MlpImpl>(with_unused);
}

double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  auto gen = at::detail::createCPUGenerator(1000 + step);
  auto x = torch::randn({kBatch, 16}, gen, torch::kFloat64);
  auto y = torch::randn({kBatch, 4}, gen, torch::kFloat64);
  return {x, y};
}

torch::Tensor shard(const torch::Tensor& t, int rank, int world) {
  const int64_t per = t.size(0) / world;
  return t.narrow(0, rank * per, per);
}

// The seed's Adam settings (ds_config.json), with a weight decay large enough to matter.
const ddp::AdamOptions kAdam{2e-3, 0.8, 0.999, 1e-8, 0.01, true};

torch::optim::AdamWOptions libtorch_adamw() {
  return torch::optim::AdamWOptions(kAdam.lr)
      .betas({kAdam.beta1, kAdam.beta2})
      .eps(kAdam.eps)
      .weight_decay(kAdam.weight_decay);
}

// This rank's slice of bucket k of a DDP optimizer's moment, cut as ZeRO cuts its buckets.
torch::Tensor reference_slice(const ddp::ZeroBucket& b, int rank, const std::vector<torch::Tensor>& ddp_params,
                              torch::optim::AdamW& ref, bool second_moment) {
  auto flat = torch::zeros({b.padded_numel}, torch::kFloat64);
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

int zero_equals_ddp(int rank, std::shared_ptr<ddp::ProcessGroup> pg, Variant v) {
  const int world = pg->size();
  // Rank 0 starts both models from the same weights; the other ranks from others (the wraps must fix it).
  const uint64_t seed = rank == 0 ? 100 : 100 + 17 * rank;
  auto zero_net = make_mlp(seed), ddp_net = make_mlp(seed);
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
  if (max_difference(*zero_net, *ddp_net) != 0 || max_difference(*zero_net, *make_mlp(100)) != 0) {
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
      auto [x, y] = batch(step * v.micro_batches + m);
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
  for (size_t k = 0; k < buckets.size(); ++k) {
    const auto params = ddp_net->parameters();
    moment_diff = std::max(moment_diff,
                           (optimizer.exp_avg_shards()[k] - reference_slice(buckets[k], rank, params, reference, false))
                               .abs()
                               .max()
                               .item<double>());
    moment_diff = std::max(
        moment_diff, (optimizer.exp_avg_sq_shards()[k] - reference_slice(buckets[k], rank, params, reference, true))
                         .abs()
                         .max()
                         .item<double>());
  }
  std::printf(
      "rank %d of %d, ZeRO-%d, %d micro-batch(es), clip %g: max |ZeRO - DDP| = %.3g (moments %.3g) after %d "
      "steps; clipped in %d steps, norms differ by %.3g (relative)\n",
      rank, world, v.stage, v.micro_batches, v.clip, diff, moment_diff, kSteps, clipped_steps, worst_norm_difference);
  bool ok = diff <= kTolerance && moment_diff <= kTolerance && worst_norm_difference <= 1e-12;
  if (v.clip > 0 && clipped_steps < kSteps / 2) {
    std::fprintf(stderr, "rank %d: clipping happened in only %d of %d steps: the test would prove little\n", rank,
                 clipped_steps, kSteps);
    ok = false;
  }
  if (max_difference(*zero_net, *make_mlp(100)) < 1e-3) {
    std::fprintf(stderr, "rank %d: the parameters hardly moved\n", rank);
    ok = false;
  }
  return ok ? 0 : 1;
}

constexpr double kClip = 0.05;  // below the gradient norm of most steps here: clipping happens

int run(int world, Variant v) {
  return ddp_test::run_ranks(world, [v](int rank, auto pg) { return zero_equals_ddp(rank, pg, v); });
}

// Each stage with 2 and 3 ranks, with and without clipping, with no_sync() accumulation, and with
// gradients zeroed in place (under ZeRO-1 .grad lives in the buckets).
TEST(ZeroEquivalence, Zero1TwoRanksEqualsDdp) { EXPECT_EQ(run(2, {1, 1, 0}), 0); }
TEST(ZeroEquivalence, Zero1ThreeRanksClippedEqualsDdp) { EXPECT_EQ(run(3, {1, 1, kClip}), 0); }
TEST(ZeroEquivalence, Zero1TwoRanksNoSyncZeroedInPlaceEqualsDdp) { EXPECT_EQ(run(2, {1, 3, 0, false}), 0); }
TEST(ZeroEquivalence, Zero1ThreeRanksNoSyncClippedEqualsDdp) { EXPECT_EQ(run(3, {1, 3, kClip}), 0); }
TEST(ZeroEquivalence, Zero2TwoRanksClippedEqualsDdp) { EXPECT_EQ(run(2, {2, 1, kClip}), 0); }
TEST(ZeroEquivalence, Zero2ThreeRanksEqualsDdp) { EXPECT_EQ(run(3, {2, 1, 0}), 0); }
TEST(ZeroEquivalence, Zero2TwoRanksNoSyncClippedEqualsDdp) { EXPECT_EQ(run(2, {2, 3, kClip}), 0); }
TEST(ZeroEquivalence, Zero2ThreeRanksNoSyncZeroedInPlaceEqualsDdp) { EXPECT_EQ(run(3, {2, 3, 0, false}), 0); }
// DeepSpeed's way to accumulate: every micro-batch reduces; ZeRO-2 adds into its gradient slice.
TEST(ZeroEquivalence, Zero2TwoRanksSyncedAccumulationEqualsDdp) { EXPECT_EQ(run(2, {2, 2, kClip, true, false}), 0); }

// Each rank holds 1/N of the optimizer state (and, under ZeRO-2, of the gradients): counted from the tensors.
TEST(ZeroEquivalence, EachRankHoldsItsShareOfTheState) {
  EXPECT_EQ(ddp_test::run_ranks(3,
                                [](int rank, auto pg) {
                                  auto net = make_mlp(3);
                                  int64_t numel = 0;
                                  for (const auto& p : net->parameters()) numel += p.numel();
                                  ddp::ZeroOptions zo;
                                  zo.stage = 2;
                                  zo.bucket_mb = 0.02;
                                  ddp::ZeroDataParallel<MlpImpl> zero(net, pg, zo);
                                  ddp::ShardedAdamW optimizer(zero, kAdam);
                                  int64_t padded = 0, grad_bytes = 0;
                                  for (const auto& b : zero.reducer()->buckets()) padded += b.padded_numel;
                                  for (const auto& g : zero.reducer()->gradient_shards()) grad_bytes += g.nbytes();
                                  const int64_t full_state = 2 * numel * 8;  // AdamW: two float64 moments
                                  std::printf(
                                      "rank %d: optimizer state %lld bytes, 1/3 of the full %lld is %lld; "
                                      "gradient shards %lld bytes\n",
                                      rank, static_cast<long long>(optimizer.state_bytes()),
                                      static_cast<long long>(full_state), static_cast<long long>(full_state / 3),
                                      static_cast<long long>(grad_bytes));
                                  const bool state_ok = optimizer.state_bytes() == 2 * padded / 3 * 8 &&
                                                        optimizer.state_bytes() - full_state / 3 < 2 * 3 * 8 * 3;
                                  const bool grads_ok = grad_bytes == padded / 3 * 8;
                                  return state_ok && grads_ok ? 0 : 1;
                                }),
            0);
}

TEST(ZeroEquivalence, OneRankEqualsLibTorchAdamW) {
  EXPECT_EQ(ddp_test::run_ranks(1,
                                [](int, auto pg) {
                                  auto net = make_mlp(9), reference = make_mlp(9);
                                  ddp::ZeroDataParallel<MlpImpl> zero(net, pg, {2, 0.02, true});
                                  ddp::ShardedAdamW optimizer(zero, kAdam);
                                  torch::optim::AdamW ref(reference->parameters(), libtorch_adamw());
                                  for (int step = 0; step < 10; ++step) {
                                    auto [x, y] = batch(step);
                                    optimizer.zero_grad();
                                    ref.zero_grad();
                                    torch::mse_loss(zero->forward(x), y).backward();
                                    torch::mse_loss(reference->forward(x), y).backward();
                                    optimizer.step();
                                    ref.step();
                                  }
                                  const double diff = max_difference(*net, *reference);
                                  std::printf("one rank: max |ZeRO-2 - AdamW| = %.3g\n", diff);
                                  return diff <= kTolerance ? 0 : 1;
                                }),
            0);
}

bool fails_with(const std::function<void()>& f, const char* expected) {
  try {
    f();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(expected) != std::string::npos) return true;
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
    return false;
  }
  std::fprintf(stderr, "no error, expected one with \"%s\"\n", expected);
  return false;
}

TEST(ZeroEquivalence, MisuseIsAnErrorNamingTheFix) {
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [](int rank, auto pg) {
                  bool ok = fails_with([&] { ddp::ZeroDataParallel<MlpImpl>(make_mlp(1), pg, {3}); },
                                       "ZeRO stage 3 is not available");
                  auto net = make_mlp(1, /*with_unused=*/true);
                  ddp::ZeroDataParallel<MlpImpl> zero(net, pg, {2, 0.02, true});
                  ddp::ShardedAdamW optimizer(zero, kAdam);
                  ok &= fails_with([&] { optimizer.step(); }, "without a synchronized backward");
                  auto [x, y] = batch(0);
                  ok &= fails_with(
                      [&] { torch::mse_loss(zero->forward(shard(x, rank, 2)), shard(y, rank, 2)).backward(); },
                      "unused.weight");
                  {
                    auto no_sync = zero.no_sync();
                    torch::mse_loss(zero->forward(shard(x, rank, 2)), shard(y, rank, 2)).backward();
                  }
                  ok &= fails_with([&] { optimizer.step(); }, "without a synchronized backward");  // no_sync only
                  return ok ? 0 : 1;
                }),
            0);
}

// A pass that fails after part of the gradients were reduce-scattered cannot be forgotten: the next
// backward says the ranks are out of step; the one after works.
TEST(ZeroEquivalence, Zero2BackwardInterruptedAfterBucketsSentIsAnError) {
  EXPECT_EQ(
      ddp_test::run_ranks(
          2,
          [](int rank, auto pg) {
            auto net = make_mlp(7);
            ddp::ZeroDataParallel<MlpImpl> zero(net, pg, {2, 0.02, true});
            ddp::ShardedAdamW optimizer(zero, kAdam);
            auto [x, y] = batch(0);
            const auto xs = shard(x, rank, 2), ys = shard(y, rank, 2);
            auto h2 = torch::tanh(net->l2(torch::tanh(net->l1(xs))));
            h2.register_hook([](torch::Tensor) -> torch::Tensor { throw std::runtime_error("injected failure"); });
            bool ok = fails_with([&] { torch::mse_loss(net->l4(torch::tanh(net->l3(h2))), ys).backward(); },
                                 "injected failure");
            optimizer.zero_grad();
            ok &= fails_with([&] { torch::mse_loss(zero->forward(xs), ys).backward(); }, "out of step");
            optimizer.zero_grad();
            torch::mse_loss(zero->forward(xs), ys).backward();
            optimizer.step();
            return ok ? 0 : 1;
          }),
      0);
}

}  // namespace zero_equivalence
