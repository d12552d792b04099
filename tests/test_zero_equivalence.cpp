// ZeRO-1 and ZeRO-2 (ddp::ZeroDataParallel + ddp::ShardedAdamW) are proven equal to plain DDP with
// LibTorch's own torch::optim::AdamW: N ranks (separate processes, Gloo) train both side by side on
// the same shards of each batch, a float64 model in several buckets whose sizes do not divide by N
// (padding, parameters cut between ranks). After 15 steps the parameters agree within 1e-9, and
// each rank's slice of Adam's moments equals the same slice of the DDP optimizer's state. Also with
// gradient clipping by the global norm (compared with torch::nn::utils::clip_grad_norm_ at every
// step, and clipping must really happen) and with no_sync() gradient accumulation. The scenarios are
// in zero_scenarios.h; the GPU suite (test_gpu_zero.cpp) runs them on CUDA tensors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "ddp/detail/collective_check.h"  // defines: CheckedBackend (its count of the collectives)
#include "ddp/distributed_data_parallel.h"
#include "ddp/sharded_adamw.h"
#include "ddp/timeline.h"
#include "ddp/zero_data_parallel.h"
#include "multiprocess.h"
#include "zero_scenarios.h"

// A named namespace, not an anonymous one: the test files are compiled in batches (unity build).
namespace zero_equivalence {

using namespace zero_scenarios;  // MlpImpl, batch, shard, kAdam, Variant, zero_equals_ddp: shared with the GPU suite

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
  EXPECT_EQ(ddp_test::run_ranks(1, [](int, auto pg) { return one_rank_equals_libtorch_adamw(pg); }), 0);
}

// World size 1: the wrappers skip their per-step collectives (one rank's sum is its own tensors),
// unless ProcessGroupOptions::collectives_at_world_size_1 keeps them, as the one-GPU NCCL tests do
// to run NCCL in the step. Counted per training step by the group's numbered backend (Gloo here):
// DDP one allreduce per bucket, ZeRO-1 an allreduce and ZeRO-2 a reduce-scatter per bucket, and
// both an all-gather of the parameters per bucket after the step; none without the switch. With
// the switch DDP still trains bit for bit as one process, and ZeRO-2 (clipped) as LibTorch's AdamW.
TEST(WorldSizeOne, TheSwitchKeepsEveryPerStepCollective) {
  for (const bool keep : {false, true}) {
    ddp_test::RankSetup setup;
    setup.n = 1;
    setup.collectives_at_world_size_1 = keep;
    setup.phase = keep ? "kept" : "skipped";
    const int rc = ddp_test::run_ranks(setup, [keep](int, std::shared_ptr<ddp::ProcessGroup> pg) {
      const auto& numbered = dynamic_cast<const ddp::CheckedBackend&>(pg->backend());
      bool ok = pg->skips_collectives() == !keep;
      auto count_steps = [&](const std::string& what, size_t buckets, int64_t per_bucket,
                             const std::function<void(int)>& step) {
        for (int s = 0; s < 3; ++s) {
          const int64_t before = numbered.issued();
          step(s);
          const int64_t issued = numbered.issued() - before;
          const int64_t expected = keep ? per_bucket * static_cast<int64_t>(buckets) : 0;
          std::printf("%s, step %d: %lld collectives (%zu buckets; expected %lld)\n", what.c_str(), s,
                      static_cast<long long>(issued), buckets, static_cast<long long>(expected));
          ok = ok && issued == expected;
        }
      };
      auto net = make_mlp(5);
      ddp::DdpOptions options;
      options.bucket_mb = 0.02;
      ddp::DistributedDataParallel ddp_model(net, pg, options);
      torch::optim::SGD sgd(net->parameters(), 0.01);
      count_steps("DDP", ddp_model.bucket_count(), 1, [&](int s) {
        auto [x, y] = batch(s);
        sgd.zero_grad();
        torch::mse_loss(ddp_model(x), y).backward();
        sgd.step();
      });
      for (const int stage : {1, 2}) {
        auto zero_net = make_mlp(6);
        ddp::ZeroDataParallel<MlpImpl> zero(zero_net, pg, {stage, 0.02, true});
        ddp::ShardedAdamW optimizer(zero, kAdam);
        count_steps("ZeRO-" + std::to_string(stage), zero.bucket_count(), 2, [&](int s) {
          auto [x, y] = batch(s);
          optimizer.zero_grad();
          torch::mse_loss(zero->forward(x), y).backward();
          optimizer.step();
        });
      }
      if (keep)
        ok = ok && ddp_scenarios::train_and_compare(0, pg, 3, false, 0.0) == 0 &&
             one_rank_equals_libtorch_adamw(pg, kClip) == 0;
      return ok ? 0 : 1;
    });
    EXPECT_EQ(rc, 0) << (keep ? "with" : "without") << " the switch";
  }
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

// The engine core both engines stand on (ddp/detail/engine_core.h): each rank starts from other
// weights and buffers (float parameters, float and int64 BatchNorm buffers: two dtypes), and
// after wrapping (DDP, ZeRO-1, ZeRO-2: one coalesced broadcast per dtype) holds rank 0's; one
// backward of each records its buckets' collectives on the timeline, ZeRO's as DDP's.
int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ZeroEquivalence, EngineCoreBroadcastsEveryDtypeAndRecordsEveryEnginesBuckets) {
  EXPECT_EQ(
      ddp_test::run_ranks(
          2,
          [](int rank, auto pg) {
            ddp::start_timeline({.rank = rank, .backward_nodes = false});
            int wrong = 0;
            // Rank r's k-th tensor (parameters, then buffers) holds (k + 1) * (r + 1).
            auto fill = [](torch::nn::Sequential& net, int times) {
              torch::NoGradGuard no_grad;
              double value = 1;
              for (auto& t : net->parameters()) t.fill_(value++ * times);
              for (auto& t : net->buffers()) t.fill_(value++ * times);
            };
            auto holds_rank0s = [&](torch::nn::Sequential& net, const char* engine) {
              torch::nn::Sequential want(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
              fill(want, 1);
              const auto have = net->parameters(), expected = want->parameters();
              const auto have_b = net->buffers(), expected_b = want->buffers();
              for (size_t k = 0; k < have.size(); ++k) wrong += !torch::equal(have[k], expected[k]);
              for (size_t k = 0; k < have_b.size(); ++k) wrong += !torch::equal(have_b[k], expected_b[k]);
              if (wrong) std::fprintf(stderr, "rank %d: %s: not rank 0's weights and buffers\n", rank, engine);
            };
            auto input = [] {
              torch::manual_seed(0);
              return torch::randn({4, 3});
            };
            {
              torch::nn::Sequential net(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
              fill(net, rank + 1);
              ddp::DistributedDataParallel model(net, pg);
              holds_rank0s(net, "DistributedDataParallel");
              model(input()).sum().backward();
            }
            for (int stage : {1, 2}) {
              torch::nn::Sequential net(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
              fill(net, rank + 1);
              ddp::ZeroOptions options;
              options.stage = stage;
              ddp::ZeroDataParallel model(net, pg, options);
              holds_rank0s(net, stage == 1 ? "ZeRO-1" : "ZeRO-2");
              model(input()).sum().backward();
            }
            ddp::stop_timeline();
            // A span is added when its collective's future completes, on the backend's thread.
            const std::string allreduce = "gradient allreduce (bucket 1 of 1)";
            const std::string reduce_scatter = "gradient reduce-scatter (bucket 1 of 1)";
            std::string events = ddp::timeline_events();
            for (int i = 0; i < 200 && (count_of(events, allreduce) < 2 || count_of(events, reduce_scatter) < 1); ++i) {
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
              events = ddp::timeline_events();
            }
            const int allreduces = count_of(events, allreduce), reduce_scatters = count_of(events, reduce_scatter);
            if (allreduces != 2 || reduce_scatters != 1) {
              std::fprintf(stderr,
                           "rank %d: the timeline has %d bucket allreduces (DDP, ZeRO-1: want 2) and %d "
                           "reduce-scatters (ZeRO-2: want 1)\n",
                           rank, allreduces, reduce_scatters);
              ++wrong;
            }
            return wrong == 0 ? 0 : 1;
          }),
      0);
}

}  // namespace zero_equivalence
