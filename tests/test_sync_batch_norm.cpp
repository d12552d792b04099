// ddp::SyncBatchNorm and convert_sync_batchnorm (sync_batch_norm.h) on the CPU over Gloo:
//   * 2 and 3 ranks with uneven batches (an empty one, a batch of one sample) compute what
//     LibTorch's BatchNorm computes on one process over the concatenation of their batches: the
//     outputs, the input gradients, the weight and bias gradients (summed over the ranks), the
//     running statistics (global unbiased variance) and the evaluation outputs (scenarios in
//     batchnorm_scenarios.h; test_batchnorm_python.cpp holds them against Python's BatchNorm);
//   * without a group (one process) it is torch::nn::BatchNorm2d bit for bit; its state_dict is
//     BatchNorm's;
//   * DistributedDataParallel over a converted model trains as one process on the whole batch;
//   * convert_sync_batchnorm replaces what sits in Sequential/ModuleList/ModuleDict, sharing the
//     tensors, and refuses, naming each and changing nothing, what it cannot replace.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "batchnorm_scenarios.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/error.h"
#include "ddp/sync_batch_norm.h"
#include "ddp/weights_io.h"
#include "multiprocess.h"

namespace sync_batch_norm_tests {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- against BatchNorm on the concatenated batch ----------------------------------------------

// One run per configuration (a phase each), every rank computing the reference itself.
int run_configs(int world) {
  int failures = 0;
  for (const auto& config : bn_scenarios::configs()) {
    if (static_cast<int>(config.sizes.size()) != world) continue;
    ddp_test::RankSetup setup;
    setup.n = world;
    setup.phase = config.name;
    failures += ddp_test::run_ranks(setup, [&](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
      const auto inputs = bn_scenarios::make_inputs(config);
      return bn_scenarios::run_rank(config, rank, pg, inputs, bn_scenarios::reference(config, inputs), true);
    });
  }
  return failures;
}

TEST(SyncBatchNorm, TwoRanksEqualBatchNormOverTheirBatches) { EXPECT_EQ(run_configs(2), 0); }

TEST(SyncBatchNorm, ThreeRanksEqualBatchNormOverTheirBatches) { EXPECT_EQ(run_configs(3), 0); }

// ---- one process -------------------------------------------------------------------------------

TEST(SyncBatchNorm, WithoutAGroupIsBatchNormBitForBit) {
  torch::manual_seed(3);
  for (auto momentum : {std::optional<double>(0.2), std::optional<double>()}) {
    const auto options = torch::nn::BatchNormOptions(5).momentum(momentum);
    torch::nn::BatchNorm2d plain(options);
    ddp::SyncBatchNorm sync(options);
    {
      torch::NoGradGuard no_grad;
      plain->weight.uniform_(0.5, 1.5);
      plain->bias.uniform_(-1, 1);
      sync->weight.copy_(plain->weight);
      sync->bias.copy_(plain->bias);
    }
    for (int step = 0; step < 3; ++step) {
      auto x = torch::randn({4, 5, 3, 3});
      auto dy = torch::randn({4, 5, 3, 3});
      auto xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
      auto ya = plain(xa), yb = sync(xb);
      (ya * dy).sum().backward();
      (yb * dy).sum().backward();
      EXPECT_TRUE(torch::equal(ya, yb));
      EXPECT_TRUE(torch::equal(xa.grad(), xb.grad()));
      EXPECT_TRUE(torch::equal(plain->weight.grad(), sync->weight.grad()));
      EXPECT_TRUE(torch::equal(plain->bias.grad(), sync->bias.grad()));
    }
    EXPECT_TRUE(torch::equal(plain->running_mean, sync->running_mean));
    EXPECT_TRUE(torch::equal(plain->running_var, sync->running_var));
    EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 3);
    plain->eval();
    sync->eval();
    auto x = torch::randn({2, 5, 3, 3});
    EXPECT_TRUE(torch::equal(plain(x), sync(x)));
  }
}

TEST(SyncBatchNorm, StateDictIsBatchNormsAndLoadsBothWays) {
  for (bool affine : {true, false}) {
    const auto options = torch::nn::BatchNormOptions(6).affine(affine);
    torch::nn::BatchNorm2d plain(options);
    ddp::SyncBatchNorm sync(options);
    const auto a = ddp::state_dict(*plain), b = ddp::state_dict(*sync);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(a[i].second.sizes(), b[i].second.sizes());
      EXPECT_EQ(a[i].second.scalar_type(), b[i].second.scalar_type());
    }
  }
  // A file written from one loads into the other (snapshots and exports stay compatible).
  char dir[] = "/tmp/ddpw-sbn-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/bn.pt";
  torch::nn::BatchNorm2d plain(4);
  plain->train();
  plain(torch::randn({3, 4, 2, 2}) * 3 + 1);  // running statistics away from 0 and 1
  ddp::export_weights(file, *plain);
  ddp::SyncBatchNorm sync(4);
  ddp::import_weights(file, *sync);
  EXPECT_TRUE(torch::equal(sync->running_mean, plain->running_mean));
  EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 1);
  ddp::export_weights(file, *sync);
  torch::nn::BatchNorm2d back(4);
  ddp::import_weights(file, *back);
  EXPECT_TRUE(torch::equal(back->running_var, plain->running_var));
  ::unlink(file.c_str());
  ::rmdir(dir);
  // clone() (Cloneable) copies the state into fresh tensors.
  auto copy = std::dynamic_pointer_cast<ddp::SyncBatchNormImpl>(sync->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(torch::equal(copy->running_mean, sync->running_mean));
  EXPECT_FALSE(copy->running_mean.is_same(sync->running_mean));
}

TEST(SyncBatchNorm, WrongInputIsNamed) {
  ddp::SyncBatchNorm sync(4);
  try {
    sync(torch::randn({2, 3, 5}));
    FAIL() << "3 channels into SyncBatchNorm(4) ran";
  } catch (const ddp::Error& e) {
    EXPECT_TRUE(contains(e.what(), "SyncBatchNorm(4) got 3 channels")) << e.what();
  }
  EXPECT_THROW(sync(torch::randn({4})), ddp::Error);
}

// ---- DistributedDataParallel over SyncBatchNorm == one process on the whole batch -----------------

TEST(SyncBatchNormDdp, TwoRanksUnevenEqualOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int r, auto pg) {
                                  return bn_scenarios::train_with_sync_batchnorm(r, pg, {5, 2});
                                }),
            0);
}

TEST(SyncBatchNormDdp, ThreeRanksUnevenEqualOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(3,
                                [](int r, auto pg) {
                                  return bn_scenarios::train_with_sync_batchnorm(r, pg, {1, 4, 3});
                                }),
            0);
}

// A typed ddp::SyncBatchNorm member without a group gets the wrapper's (and then syncs).
struct TypedNetImpl : torch::nn::Module {
  TypedNetImpl() {
    fc = register_module("fc", torch::nn::Linear(3, 4));
    bn = register_module("bn", ddp::SyncBatchNorm(4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(fc(x)); }
  torch::nn::Linear fc{nullptr};
  ddp::SyncBatchNorm bn{nullptr};
};

TEST(SyncBatchNormDdp, TypedMemberGetsTheWrappersGroup) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int rank, auto pg) {
                                  auto net = std::make_shared<TypedNetImpl>();
                                  if (net->bn->process_group()) return 1;
                                  ddp::DistributedDataParallel<TypedNetImpl> model(net, pg);
                                  if (net->bn->process_group() != pg) return 2;
                                  // Rank 0 has all-zero inputs, rank 1 ones: the mean both see is the
                                  // common one, not their own.
                                  model(torch::full({4, 3}, static_cast<double>(rank), torch::kFloat32));
                                  std::vector<torch::Tensor> rank0{net->bn->running_mean.clone()};
                                  pg->broadcast(rank0, 0);
                                  return torch::allclose(rank0[0], net->bn->running_mean) ? 0 : 3;
                                }),
            0);
}

// ---- convert_sync_batchnorm --------------------------------------------------------------------

struct HolderImpl : torch::nn::Module {
  HolderImpl() {
    seq = register_module("seq", torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4)));
    list = register_module("list", torch::nn::ModuleList(torch::nn::BatchNorm2d(2)));
    std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> norms{
        {"norm", std::make_shared<torch::nn::BatchNorm3dImpl>(2)}};
    dict = register_module("dict", torch::nn::ModuleDict(norms));
  }
  torch::Tensor forward(const torch::Tensor& x) { return seq->forward(x); }
  torch::nn::Sequential seq{nullptr};
  torch::nn::ModuleList list{nullptr};
  torch::nn::ModuleDict dict{nullptr};
};

TEST(ConvertSyncBatchnorm, ReplacesContainedBatchNormsSharingTheirTensors) {
  auto holder = std::make_shared<HolderImpl>();
  holder->list[0]->as<torch::nn::BatchNorm2dImpl>()->eval();  // the training mode travels
  const auto old_weight = holder->seq[1]->as<torch::nn::BatchNorm1dImpl>()->weight;
  const auto old_mean = holder->seq[1]->as<torch::nn::BatchNorm1dImpl>()->running_mean;
  const auto keys_before = ddp::state_dict(*holder);
  torch::optim::SGD opt(holder->parameters(), 0.1);  // built before: still trains the same tensors

  EXPECT_EQ(ddp::convert_sync_batchnorm(*holder, nullptr), 3u);
  auto* in_seq = holder->seq[1]->as<ddp::SyncBatchNormImpl>();
  ASSERT_NE(in_seq, nullptr);
  EXPECT_NE(holder->seq.ptr()->named_children()["1"]->as<ddp::SyncBatchNormImpl>(), nullptr);  // registry too
  EXPECT_TRUE(in_seq->weight.is_same(old_weight));
  EXPECT_TRUE(in_seq->running_mean.is_same(old_mean));
  auto* in_list = holder->list[0]->as<ddp::SyncBatchNormImpl>();
  ASSERT_NE(in_list, nullptr);
  EXPECT_FALSE(in_list->is_training());
  EXPECT_NE(holder->dict["norm"]->as<ddp::SyncBatchNormImpl>(), nullptr);
  EXPECT_NE(holder->dict->named_children()["norm"]->as<ddp::SyncBatchNormImpl>(), nullptr);
  const auto keys_after = ddp::state_dict(*holder);
  ASSERT_EQ(keys_before.size(), keys_after.size());
  for (size_t i = 0; i < keys_before.size(); ++i) EXPECT_EQ(keys_before[i].first, keys_after[i].first);
  // The Sequential's forward goes through the SyncBatchNorm: its batch counter moves.
  holder->forward(torch::randn({5, 3}));
  EXPECT_EQ(in_seq->num_batches_tracked.item<int64_t>(), 1);
  // Converting again finds no BatchNorm, only SyncBatchNorm layers (whose group it sets).
  EXPECT_EQ(ddp::convert_sync_batchnorm(*holder, nullptr), 3u);
}

struct TypedMemberImpl : torch::nn::Module {
  TypedMemberImpl() {
    seq = register_module("seq", torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4)));
    bn = register_module("bn", torch::nn::BatchNorm1d(4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(seq->forward(x)); }
  torch::nn::Sequential seq{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

struct OuterImpl : torch::nn::Module {
  OuterImpl() { block = register_module("block", std::make_shared<TypedMemberImpl>()); }
  std::shared_ptr<TypedMemberImpl> block;
};

TEST(ConvertSyncBatchnorm, TypedMemberIsRefusedByNameAndNothingChanges) {
  auto outer = std::make_shared<OuterImpl>();
  try {
    ddp::convert_sync_batchnorm(*outer, nullptr);
    FAIL() << "a typed BatchNorm member was 'converted'";
  } catch (const ddp::Error& e) {
    EXPECT_TRUE(contains(e.what(), "'block.bn' (torch::nn::BatchNorm1dImpl held by a member of")) << e.what();
    EXPECT_FALSE(contains(e.what(), "block.seq.1")) << e.what();
    EXPECT_TRUE(contains(e.hint(), "ddp::SyncBatchNorm")) << e.hint();
  }
  EXPECT_NE(outer->block->seq[1]->as<torch::nn::BatchNorm1dImpl>(), nullptr);  // nothing was converted
}

TEST(ConvertSyncBatchnorm, BatchNormAlsoHeldOutsideItsContainerIsRefused) {
  torch::nn::BatchNorm1d kept(4);
  torch::nn::Sequential seq(torch::nn::Linear(3, 4), kept);
  try {
    ddp::convert_sync_batchnorm(*seq, nullptr);
    FAIL() << "a BatchNorm still held by a variable was replaced";
  } catch (const ddp::Error& e) {
    EXPECT_TRUE(contains(e.what(), "'1' (torch::nn::BatchNorm1dImpl in a Sequential, also held outside it)"))
        << e.what();
  }
  kept = nullptr;  // once only the Sequential holds it, it converts
  EXPECT_EQ(ddp::convert_sync_batchnorm(*seq, nullptr), 1u);
}

TEST(ConvertSyncBatchnorm, ABatchNormItselfIsRefused) {
  torch::nn::BatchNorm2d bn(3);
  try {
    ddp::convert_sync_batchnorm(*bn, nullptr);
    FAIL() << "a BatchNorm converted itself";
  } catch (const ddp::Error& e) {
    EXPECT_TRUE(contains(e.hint(), "construct a ddp::SyncBatchNorm")) << e.hint();
  }
}

}  // namespace sync_batch_norm_tests
