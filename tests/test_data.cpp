// The data every step trains on (ddp/data.h): the DistributedSampler's shards are disjoint and
// cover the data, set_epoch reshuffles deterministically and differently per epoch, the synthetic
// dataset is the same for a seed and learnable, and the Loader cuts batches of the right shapes.
// Evaluation (course/workload.h), which sums on the device, gives the host sums bit for bit on the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <vector>

#include "course/models.h"
#include "course/workload.h"
#include "ddp/data.h"
#include "ddp/error.h"

namespace data_test {

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  const auto c = t.contiguous().to(torch::kInt64);
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Every rank's indices for one epoch.
std::vector<std::vector<int64_t>> shards(int64_t size, int replicas, uint64_t seed, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int rank = 0; rank < replicas; ++rank) {
    ddp::DistributedSampler sampler(size, replicas, rank, seed);
    sampler.set_epoch(epoch);
    out.push_back(to_vector(sampler.indices()));
  }
  return out;
}

TEST(DistributedSampler, ShardsAreDisjointEqualAndCoverTheData) {
  const auto parts = shards(2048, 4, /*seed=*/7, /*epoch=*/3);
  std::set<int64_t> seen;
  for (const auto& part : parts) {
    EXPECT_EQ(part.size(), 512u);
    for (int64_t i : part) {
      EXPECT_TRUE(i >= 0 && i < 2048) << i;
      EXPECT_TRUE(seen.insert(i).second) << "index " << i << " is in two shards";
    }
  }
  EXPECT_EQ(seen.size(), 2048u);
}

TEST(DistributedSampler, AnUnevenSizeIsPaddedSoEveryRankGetsAsMany) {
  // 10 samples on 3 ranks: 4 each, 12 in all, so 2 samples are seen twice and none is missed.
  const auto parts = shards(10, 3, /*seed=*/0, /*epoch=*/0);
  std::multiset<int64_t> all;
  for (const auto& part : parts) {
    EXPECT_EQ(part.size(), 4u);
    all.insert(part.begin(), part.end());
  }
  EXPECT_EQ(all.size(), 12u);
  for (int64_t i = 0; i < 10; ++i) EXPECT_GE(all.count(i), 1u) << "sample " << i << " is in no shard";
}

TEST(DistributedSampler, OneReplicaIsAPlainShuffle) {
  auto order = to_vector(ddp::DistributedSampler(100, 1, 0, 5).indices());
  ASSERT_EQ(order.size(), 100u);
  std::vector<int64_t> identity(100);
  for (int64_t i = 0; i < 100; ++i) identity[i] = i;
  EXPECT_NE(order, identity) << "not shuffled";
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, identity) << "not a permutation";
}

TEST(DistributedSampler, SetEpochReshufflesDeterministicallyAndDifferentlyPerEpoch) {
  // The same (seed, epoch) gives the same order in another sampler (another rank, another run).
  EXPECT_EQ(shards(2048, 2, 1, 4), shards(2048, 2, 1, 4));
  // Another epoch, another order; another seed, another order.
  EXPECT_NE(shards(2048, 2, 1, 4)[0], shards(2048, 2, 1, 5)[0]);
  EXPECT_NE(shards(2048, 2, 1, 4)[0], shards(2048, 2, 2, 4)[0]);

  // Going back to an epoch gives its order again (a resumed run sees the same data).
  ddp::DistributedSampler sampler(2048, 2, 1, 1);
  sampler.set_epoch(0);
  const auto epoch0 = to_vector(sampler.indices());
  sampler.set_epoch(1);
  const auto epoch1 = to_vector(sampler.indices());
  sampler.set_epoch(0);
  EXPECT_EQ(to_vector(sampler.indices()), epoch0);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(sampler.epoch(), 0);

  // Every epoch's shards are still disjoint and complete.
  for (int64_t epoch : {0, 1, 2}) {
    std::set<int64_t> seen;
    for (const auto& part : shards(2048, 2, 1, epoch)) seen.insert(part.begin(), part.end());
    EXPECT_EQ(seen.size(), 2048u) << "epoch " << epoch;
  }
}

TEST(DistributedSampler, ABadRankIsAnError) {
  EXPECT_THROW(ddp::DistributedSampler(10, 2, 2, 0), std::exception);
  EXPECT_THROW(ddp::DistributedSampler(0, 1, 0, 0), std::exception);
}

TEST(SyntheticDataset, TheSameForASeedAndDifferentForAnother) {
  const auto a = ddp::make_synthetic_dataset(2048, 20, 3), b = ddp::make_synthetic_dataset(2048, 20, 3);
  const auto c = ddp::make_synthetic_dataset(2048, 20, 4);
  EXPECT_EQ(a.inputs.sizes(), (std::vector<int64_t>{2048, 20}));
  EXPECT_EQ(a.targets.sizes(), (std::vector<int64_t>{2048, 1}));
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
  EXPECT_FALSE(torch::equal(a.inputs, c.inputs));
  // Not affected by what else used the global generator.
  torch::manual_seed(123);
  torch::rand({100});
  EXPECT_TRUE(torch::equal(ddp::make_synthetic_dataset(2048, 20, 3).targets, a.targets));
}

TEST(SyntheticDataset, IsLearnableByALinearModel) {
  const auto d = ddp::make_synthetic_dataset(2048, 20, 0);
  // Least squares with a bias column: the residual is the 0.01 noise, far below the targets' spread.
  const auto x = torch::cat({d.inputs.to(torch::kFloat64), torch::ones({2048, 1}, torch::kFloat64)}, 1);
  const auto y = d.targets.to(torch::kFloat64);
  const auto w = torch::matmul(torch::pinverse(x), y);
  const double residual = (torch::matmul(x, w) - y).pow(2).mean().sqrt().item<double>();
  const double spread = y.std().item<double>();
  EXPECT_LT(residual, 0.02);
  EXPECT_GT(spread, 0.5);
  // The map it learns: weights from -1 to 1, bias 0.5.
  EXPECT_NEAR(w[0][0].item<double>(), -1.0, 0.02);
  EXPECT_NEAR(w[19][0].item<double>(), 1.0, 0.02);
  EXPECT_NEAR(w[20][0].item<double>(), 0.5, 0.02);
}

TEST(Loader, BatchesHaveTheRightShapesAndFollowTheSampler) {
  const auto d = ddp::make_synthetic_dataset(2048, 20, 0);
  ddp::DistributedSampler sampler(d.size(), /*num_replicas=*/2, /*rank=*/1, /*seed=*/0);
  ddp::Loader loader(d, sampler, /*batch_size=*/100, torch::Device(torch::kCPU));
  EXPECT_EQ(loader.steps(), 11);  // 1024 samples on this rank: 10 full batches and one of 24
  const auto first = loader.batch(0), last = loader.batch(10);
  EXPECT_EQ(first.input.sizes(), (std::vector<int64_t>{100, 20}));
  EXPECT_EQ(first.target.sizes(), (std::vector<int64_t>{100, 1}));
  EXPECT_EQ(last.input.sizes(), (std::vector<int64_t>{24, 20}));
  EXPECT_EQ(last.target.sizes(), (std::vector<int64_t>{24, 1}));
  EXPECT_EQ(first.input.dtype(), torch::kFloat32);
  // Step k holds the sampler's samples k*B .. k*B+B-1, so a resumed run picks up exactly there.
  const auto expected = d.inputs.index_select(0, sampler.indices().narrow(0, 300, 100));
  EXPECT_TRUE(torch::equal(loader.batch(3).input, expected));
}

// --steps: an epoch of at most N steps; the batches are the same ones (a short run is a prefix).
TEST(Loader, LimitStepsEndsTheEpochEarlyWithTheSameBatches) {
  const auto d = ddp::make_synthetic_dataset(2048, 20, 0);
  ddp::DistributedSampler sampler(d.size(), /*num_replicas=*/2, /*rank=*/1, /*seed=*/0);
  ddp::Loader loader(d, sampler, /*batch_size=*/100, torch::Device(torch::kCPU));
  const auto third = loader.batch(2).input;
  loader.limit_steps(3);
  EXPECT_EQ(loader.steps(), 3);
  EXPECT_TRUE(torch::equal(loader.batch(2).input, third));
  loader.limit_steps(50);  // more than the epoch has: the whole epoch
  EXPECT_EQ(loader.steps(), 11);
  loader.limit_steps(0);
  EXPECT_EQ(loader.steps(), 11);
  EXPECT_THROW(loader.limit_steps(-1), ddp::Error);
}

TEST(Loader, ImageBatchesAreConvertedToNormalisedFloats) {
  ddp::Dataset images;
  images.inputs = torch::full({10, 1, 28, 28}, 255, torch::kUInt8);
  images.targets = torch::arange(10, torch::kInt64);
  images.input_scale = 1.0 / 255;
  images.input_shift = 0.5;
  images.input_divide = 0.25;
  ddp::DistributedSampler sampler(images.size(), 1, 0, 0);
  ddp::Loader loader(images, sampler, /*batch_size=*/4, torch::Device(torch::kCPU));
  EXPECT_EQ(loader.steps(), 3);
  const auto b = loader.batch(2);
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_EQ(b.input.dtype(), torch::kFloat32);
  EXPECT_EQ(b.target.sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(b.target.dtype(), torch::kInt64);
  EXPECT_NEAR(b.input.min().item<double>(), (1.0 - 0.5) / 0.25, 1e-6);  // 255 -> 1 -> 0.5 -> 2
  EXPECT_NEAR(b.input.max().item<double>(), 2.0, 1e-6);
}

}  // namespace data_test

TEST(Dataset, OnTheCpuIsItself) {
  const auto d = ddp::make_synthetic_dataset(64, 20, 0);
  EXPECT_EQ(&d.on(torch::Device(torch::kCPU)), &d);  // no copy where the data already are
}

namespace data_test {

// What evaluate() computed before it summed on the device: per batch, the mean loss read to the
// host times the batch size, and the correct answers read to the host, summed in doubles.
ddpw::EvalResult evaluate_on_the_host(ddpw::Model& model, const ddpw::Workload& w, int64_t batch, int rank, int world) {
  torch::NoGradGuard no_grad;
  model.eval();
  const auto shard = torch::arange(rank, w.test.size(), world, torch::kInt64);
  double loss_sum = 0, correct = 0;
  for (int64_t start = 0; start < shard.size(0); start += batch) {
    const auto idx = shard.narrow(0, start, std::min(batch, shard.size(0) - start));
    const ddp::Batch b = w.test.gather(idx);
    const auto out = model.forward(b.input);
    loss_sum += w.loss(out, b.target).item<double>() * static_cast<double>(idx.size(0));
    if (w.classification) correct += out.argmax(1).eq(b.target).sum().item<double>();
  }
  model.train();
  ddpw::EvalResult r;
  r.samples = shard.size(0);
  r.loss = loss_sum / static_cast<double>(r.samples);
  r.accuracy = w.classification ? correct / static_cast<double>(r.samples) : 0.0;
  return r;
}

}  // namespace data_test

// The exact-resume tests and the README's checksums rely on the CPU's numbers not moving.
TEST(Evaluate, SumsOnTheDeviceGiveTheHostSumsBitForBit) {
  ddpw::Workload images;  // a classifier on uint8 images: conversion, normalisation, argmax
  images.classification = true;
  auto gen = at::detail::createCPUGenerator(7);
  images.test.inputs = torch::randint(0, 256, {120, 1, 28, 28}, gen, torch::kUInt8);
  images.test.targets = torch::randint(0, 10, {120}, gen, torch::kInt64);
  images.test.input_scale = 1.0 / 255;
  images.test.input_shift = 0.2860;
  images.test.input_divide = 0.3530;
  images.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::nll_loss(out, y); };
  torch::manual_seed(5);
  ddpw::MnistCnn cnn;
  ddpw::Options options;  // the synthetic regression: no accuracy
  const ddpw::Workload synthetic = ddpw::make_workload(options);
  torch::manual_seed(5);
  ddpw::LinearRegressor linear(20);
  for (const auto& [rank, world] : std::vector<std::pair<int, int>>{{0, 1}, {1, 3}}) {
    const auto mine = ddpw::evaluate(cnn, images, 64, torch::kCPU, nullptr, rank, world);
    const auto host = data_test::evaluate_on_the_host(cnn, images, 64, rank, world);
    EXPECT_EQ(mine.samples, host.samples);
    EXPECT_EQ(mine.loss, host.loss) << "rank " << rank << " of " << world;
    EXPECT_EQ(mine.accuracy, host.accuracy) << "rank " << rank << " of " << world;
    const auto mine_lin = ddpw::evaluate(linear, synthetic, 100, torch::kCPU, nullptr, rank, world);
    const auto host_lin = data_test::evaluate_on_the_host(linear, synthetic, 100, rank, world);
    EXPECT_EQ(mine_lin.loss, host_lin.loss) << "rank " << rank << " of " << world;
    EXPECT_EQ(mine_lin.accuracy, 0.0);
  }
}
