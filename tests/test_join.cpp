// Uneven inputs (issue 27, item 4): ranks with different numbers of batches, on CPU ranks over Gloo.
//   * DDP inside ddp::Join finishes on 2 and 3 ranks (one with no batch at all), and every rank ends
//     with the parameters and buffers of a single-process computation of what PyTorch's Join does:
//     at step s the ranks that still have a batch sum their gradients and divide by the world size
//     (divide_by_initial_world_size=True), the others add zeros; in the end every rank holds the
//     model of the last rank to finish. Several buckets, with and without find_unused_parameters.
//   * With BatchNorm and the per-forward buffer broadcast, the joined ranks shadow the broadcast from
//     the last rank still training: 2 and 3 ranks end with the running statistics of a replay.
//   * ZeRO refuses uneven counts at once, on every rank, naming each rank's count and the fix;
//     even counts go through.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel, DdpOptions
#include "ddp/join.h"                       // defines: Join, require_even_batches
#include "ddp/zero_data_parallel.h"         // defines: ZeroDataParallel
#include "ddp_scenarios.h"                  // defines: MlpImpl, batch, shard, max_difference
#include "multiprocess.h"                   // defines: run_ranks

namespace {

using ddp_scenarios::batch;

// The scenarios' MLP plus a buffer that counts the forwards (as BatchNorm's num_batches_tracked).
struct CountingMlpImpl : ddp_scenarios::MlpImpl {
  explicit CountingMlpImpl(bool with_unused) : MlpImpl(with_unused) {
    seen = register_buffer("seen", torch::zeros({1}, torch::kFloat64));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    {
      torch::NoGradGuard no_grad;
      seen.add_(1);
    }
    return MlpImpl::forward(x);
  }
  torch::Tensor seen;
};

std::shared_ptr<CountingMlpImpl> make_model(uint64_t seed, bool with_unused) {
  torch::manual_seed(seed);
  return std::make_shared<CountingMlpImpl>(with_unused);
}

constexpr double kLr = 0.05, kMomentum = 0.9;

torch::optim::SGD make_sgd(torch::nn::Module& m) {
  return torch::optim::SGD(m.parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
}

// Rank r's batch at step s: its shard of the scenarios' batch of step s.
std::pair<torch::Tensor, torch::Tensor> rank_batch(int step, int rank, int world) {
  auto [x, y] = batch(step);
  return {ddp_scenarios::shard(x, rank, world), ddp_scenarios::shard(y, rank, world)};
}

// The reference, one process, no communication: PyTorch's Join with DDP, step by step.
std::shared_ptr<CountingMlpImpl> reference(const std::vector<int>& counts, bool with_unused) {
  const int world = static_cast<int>(counts.size());
  auto model = make_model(100, with_unused);
  auto sgd = make_sgd(*model);
  const int steps = *std::max_element(counts.begin(), counts.end());
  for (int s = 0; s < steps; ++s) {
    sgd.zero_grad();
    torch::Tensor loss;
    for (int r = 0; r < world; ++r) {
      if (s >= counts[r]) continue;  // joined: adds zeros
      auto [x, y] = rank_batch(s, r, world);
      auto l = torch::mse_loss(model->MlpImpl::forward(x), y) / world;  // the sum over ranks / N
      loss = loss.defined() ? loss + l : l;
    }
    loss.backward();
    sgd.step();
  }
  model->seen.fill_(steps);  // the last rank to finish made `steps` forwards
  return model;
}

int train_uneven(int rank, std::shared_ptr<ddp::ProcessGroup> pg, const std::vector<int>& counts, bool with_unused) {
  const int world = pg->size();
  auto model = make_model(100 + rank, with_unused);  // different weights: the wrap gives rank 0's
  ddp::DdpOptions options;
  options.bucket_mb = 0.02;  // several buckets
  options.find_unused_parameters = with_unused;
  options.broadcast_buffers = false;  // a model with buffers joins without the per-forward broadcast
  ddp::DistributedDataParallel<CountingMlpImpl> ddp_model(model, pg, options);
  auto sgd = make_sgd(*model);
  const int64_t shadowed = ddp::join(ddp_model, [&] {
    for (int s = 0; s < counts[rank]; ++s) {
      auto [x, y] = rank_batch(s, rank, world);
      sgd.zero_grad();
      torch::mse_loss(ddp_model->forward(x), y).backward();
      sgd.step();
    }
  });
  const int steps = *std::max_element(counts.begin(), counts.end());
  int failures = 0;
  if (shadowed != steps - counts[rank]) {
    std::fprintf(stderr, "rank %d shadowed %lld steps, expected %d\n", rank, static_cast<long long>(shadowed),
                 steps - counts[rank]);
    ++failures;
  }
  if (ddp_model.bucket_count() < 3) {
    std::fprintf(stderr, "expected several buckets, got %zu\n", ddp_model.bucket_count());
    ++failures;
  }
  auto ref = reference(counts, with_unused);
  const double diff = ddp_scenarios::max_difference(*model, *ref);
  const double seen = model->seen.item<double>();
  std::printf("rank %d: %d batches, shadowed %lld steps; max |param - reference| %.3g; forwards seen %.0f\n", rank,
              counts[rank], static_cast<long long>(shadowed), diff, seen);
  if (!(diff <= ddp_scenarios::kTolerance)) ++failures;
  if (seen != steps) ++failures;
  // A parameter no rank had a gradient for keeps .grad undefined, shadowed or not (as without Join).
  if (with_unused && model->unused->weight.grad().defined()) ++failures;
  return failures;
}

TEST(Join, TwoRanksUnevenEqualPyTorchsJoin) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return train_uneven(r, pg, {5, 3}, false); }), 0);
}

TEST(Join, ThreeRanksUnevenOneWithoutBatchesEqualPyTorchsJoin) {
  EXPECT_EQ(ddp_test::run_ranks(3, [](int r, auto pg) { return train_uneven(r, pg, {4, 0, 6}, false); }), 0);
}

TEST(Join, ThreeRanksUnevenWithUnusedParametersEqualPyTorchsJoin) {
  EXPECT_EQ(ddp_test::run_ranks(3, [](int r, auto pg) { return train_uneven(r, pg, {2, 5, 3}, true); }), 0);
}

TEST(Join, EvenCountsShadowNothing) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return train_uneven(r, pg, {3, 3}, false); }), 0);
}

// A model with BatchNorm and the per-forward buffer broadcast (the default): the ranks that joined
// take part in it, and its source is the last rank still training (PyTorch's join hook). Every
// rank ends with the buffers of a single-process replay: the broadcast before step s comes from
// the highest rank still training at s, holding the buffers of step s - 1 updated with its own
// batch; the final model is the last rank's. (Rank 0 as the source would give other statistics.)
struct JoinBnNetImpl : torch::nn::Module {
  JoinBnNetImpl() {
    bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc = register_module("fc", torch::nn::Linear(16, 4));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(bn(x)); }
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

int train_uneven_with_buffers(int rank, std::shared_ptr<ddp::ProcessGroup> pg, const std::vector<int>& counts) {
  const int world = pg->size();
  torch::manual_seed(7 + rank);
  auto model = std::make_shared<JoinBnNetImpl>();
  ddp::DistributedDataParallel<JoinBnNetImpl> ddp_model(model, pg);  // broadcast_buffers on
  auto sgd = make_sgd(*model);
  const int64_t shadowed = ddp::join(ddp_model, [&] {
    for (int s = 0; s < counts[rank]; ++s) {
      auto [x, y] = rank_batch(s, rank, world);
      sgd.zero_grad();
      torch::mse_loss(ddp_model(x), y).backward();
      sgd.step();
    }
  });
  const int steps = *std::max_element(counts.begin(), counts.end());
  const auto training_at = [&](int s) {  // the highest rank with a batch at step s
    int root = -1;
    for (int r = 0; r < world; ++r)
      if (counts[r] > s) root = r;
    return root;
  };
  torch::nn::BatchNorm1d ref(16);
  ref->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    for (int s = 0; s < steps; ++s) ref(rank_batch(s, training_at(s + 1 < steps ? s + 1 : s), world).first);
  }
  const bool same = torch::allclose(model->bn->running_mean, ref->running_mean, 0, 1e-12) &&
                    torch::allclose(model->bn->running_var, ref->running_var, 0, 1e-12) &&
                    model->bn->num_batches_tracked.item<int64_t>() == steps;
  std::printf("rank %d: %d batches, shadowed %lld steps; max |running mean - replay| %.3g, batches tracked %lld\n",
              rank, counts[rank], static_cast<long long>(shadowed),
              (model->bn->running_mean - ref->running_mean).abs().max().item<double>(),
              static_cast<long long>(model->bn->num_batches_tracked.item<int64_t>()));
  return same && shadowed == steps - counts[rank] ? 0 : 1;
}

TEST(Join, TwoRanksUnevenShadowTheBufferBroadcastFromTheLastRankTraining) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return train_uneven_with_buffers(r, pg, {5, 3}); }), 0);
}

TEST(Join, ThreeRanksUnevenShadowTheBufferBroadcastFromTheLastRankTraining) {
  EXPECT_EQ(ddp_test::run_ranks(3, [](int r, auto pg) { return train_uneven_with_buffers(r, pg, {4, 0, 6}); }), 0);
}

// ZeRO: every rank fails at once with every rank's count, before any step.
int zero_refuses(int rank, std::shared_ptr<ddp::ProcessGroup> pg, const std::vector<int>& counts,
                 const std::string& listing) {
  ddp::ZeroDataParallel<ddp_scenarios::MlpImpl> zero(ddp_scenarios::make_mlp(1), pg, {2, 0.02, true});
  try {
    ddp::Join join(zero, counts[rank]);
  } catch (const ddp::Error& e) {
    const std::string what = e.what();
    std::printf("rank %d: %s (fix: %s)\n", rank, e.message().c_str(), e.hint().c_str());
    const bool names_counts = what.find(listing) != std::string::npos;
    const bool names_fix =
        e.hint().find("same number of batches") != std::string::npos && e.hint().find("ddp::Join") != std::string::npos;
    return names_counts && names_fix ? 0 : 1;
  }
  std::fprintf(stderr, "rank %d: uneven counts were not refused\n", rank);
  return 1;
}

TEST(Join, ZeroRefusesUnevenCountsOnTwoRanksNamingThem) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int r, auto pg) {
                                  return zero_refuses(r, pg, {5, 4}, "rank 0: 5, rank 1: 4");
                                }),
            0);
}

TEST(Join, ZeroRefusesUnevenCountsOnThreeRanksNamingThem) {
  EXPECT_EQ(ddp_test::run_ranks(3,
                                [](int r, auto pg) {
                                  return zero_refuses(r, pg, {3, 3, 2}, "rank 0: 3, rank 1: 3, rank 2: 2");
                                }),
            0);
}

TEST(Join, ZeroAcceptsEvenCounts) {
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [](int, auto pg) {
                  ddp::ZeroDataParallel<ddp_scenarios::MlpImpl> zero(ddp_scenarios::make_mlp(1), pg, {2, 0.02, true});
                  ddp::Join join(zero, 4);
                  return join.finish() == 0 ? 0 : 1;
                }),
            0);
}

}  // namespace
