// DistributedDataParallel is proven equal to single-process training: N ranks (separate processes,
// Gloo) training on shards of each batch end with the parameters of one process training on the
// whole batch, after 25 optimizer steps, for a float64 multi-layer model spread over several
// buckets (the scenarios are in ddp_scenarios.h; the GPU suite runs them on CUDA tensors). Each
// rank computes the single-process reference itself (no communication), so the comparison is
// independent of the code under test.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "ddp/distributed_data_parallel.h"
#include "ddp_scenarios.h"
#include "multiprocess.h"

// A named namespace: the using-directive stays here, not in the files of the same unity batch.
namespace ddp_equivalence_tests {

using namespace ddp_scenarios;  // MlpImpl, batch, shard, train_and_compare, ...: shared with the GPU suite

TEST(DdpEquivalence, TwoRanksEqualOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return train_and_compare(r, pg, 1); }), 0);
}

TEST(DdpEquivalence, ThreeRanksEqualOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(3, [](int r, auto pg) { return train_and_compare(r, pg, 1); }), 0);
}

TEST(DdpEquivalence, NoSyncAccumulationEqualsOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return train_and_compare(r, pg, 3); }), 0);
}

// One run_ranks() per test: its workers re-run this test in new processes.
TEST(DdpEquivalence, GradientsZeroedInPlaceEqualOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return train_and_compare(r, pg, 1, false); }), 0);
}

TEST(DdpEquivalence, NoSyncWithGradientsZeroedInPlaceEqualsOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return train_and_compare(r, pg, 3, false); }), 0);
}

// One rank sends nothing (the sum over one rank is itself), but its gradients still go through the
// hooks, buckets and bucket views: training is plain training, bit for bit.
TEST(DdpEquivalence, OneRankEqualsPlainTrainingBitForBit) {
  EXPECT_EQ(ddp_test::run_ranks(1, [](int r, auto pg) { return train_and_compare(r, pg, 3, false, 0.0); }), 0);
}

TEST(DdpEquivalence, UnusedParameterIsNamedNotAHang) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int rank, auto pg) {
                                  auto model = make_mlp(7, /*with_unused=*/true);
                                  ddp::DistributedDataParallel<MlpImpl> ddp_model(model, pg);
                                  auto [x, y] = batch(0);
                                  try {
                                    torch::mse_loss(ddp_model->forward(x), y).backward();
                                  } catch (const std::exception& e) {
                                    const bool named = std::string(e.what()).find("unused.weight") != std::string::npos;
                                    if (!named) std::fprintf(stderr, "rank %d: unexpected error: %s\n", rank, e.what());
                                    return named ? 0 : 1;
                                  }
                                  std::fprintf(stderr, "rank %d: no error for an unused parameter\n", rank);
                                  return 1;
                                }),
            0);
}

TEST(DdpEquivalence, FindUnusedParametersEqualsOneProcess) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return find_unused_equals_one_process(r, pg); }), 0);
}

// A hook on an inner activation that throws in backward, after the last layers' gradients are
// ready (as an out-of-memory error would, part-way through).
torch::Tensor forward_failing_in_backward(MlpImpl& m, const torch::Tensor& x) {
  auto h2 = torch::tanh(m.l2(torch::tanh(m.l1(x))));
  h2.register_hook([](torch::Tensor) -> torch::Tensor { throw std::runtime_error("injected failure in backward"); });
  return m.l4(torch::tanh(m.l3(h2)));
}

bool backward_fails(const torch::Tensor& loss, const char* expected) {
  try {
    loss.backward();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(expected) != std::string::npos) return true;
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
  }
  return false;
}

// All ranks fail in the same pass before any bucket was sent (one big bucket): the pass is
// forgotten, and training goes on exactly like a single process that skipped that batch.
TEST(DdpEquivalence, BackwardInterruptedBeforeAnyBucketIsForgotten) {
  EXPECT_EQ(
      ddp_test::run_ranks(2,
                          [](int rank, auto pg) {
                            auto model = make_mlp(100 + rank), reference = make_mlp(100);
                            ddp::DistributedDataParallel<MlpImpl> ddp_model(model, pg);  // 25 MiB: one bucket
                            torch::optim::SGD opt(model->parameters(), 0.05), ref_opt(reference->parameters(), 0.05);
                            for (int step = 0; step < 6; ++step) {
                              opt.zero_grad();
                              auto [x, y] = batch(step);
                              if (step == 2) {
                                auto out = forward_failing_in_backward(*model, shard(x, rank, 2));
                                if (!backward_fails(torch::mse_loss(out, shard(y, rank, 2)), "injected")) return 1;
                                continue;  // every rank skips this batch
                              }
                              torch::mse_loss(ddp_model->forward(shard(x, rank, 2)), shard(y, rank, 2)).backward();
                              opt.step();
                              ref_opt.zero_grad();
                              torch::mse_loss(reference->forward(x), y).backward();
                              ref_opt.step();
                            }
                            const double diff = max_difference(*model, *reference);
                            std::printf("rank %d: after an interrupted backward, max |DDP - single process| = %.3g\n",
                                        rank, diff);
                            return diff <= kTolerance ? 0 : 1;
                          }),
      0);
}

// A pass that fails after part of the gradients were sent cannot be forgotten: the next backward
// says the ranks are out of step (instead of averaging different batches); the one after works.
TEST(DdpEquivalence, BackwardInterruptedAfterBucketsSentIsAnError) {
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [](int rank, auto pg) {
                  auto model = make_mlp(7);
                  ddp::DdpOptions options;
                  options.bucket_mb = 0.02;  // the first bucket (l4, l3) is sent before the failure
                  ddp::DistributedDataParallel<MlpImpl> ddp_model(model, pg, options);
                  auto [x, y] = batch(0);
                  auto loss = [&] { return torch::mse_loss(ddp_model->forward(shard(x, rank, 2)), shard(y, rank, 2)); };
                  if (!backward_fails(
                          torch::mse_loss(forward_failing_in_backward(*model, shard(x, rank, 2)), shard(y, rank, 2)),
                          "injected"))
                    return 1;
                  model->zero_grad();
                  if (!backward_fails(loss(), "out of step")) return 1;
                  model->zero_grad();
                  loss().backward();  // a fresh pass after the error works
                  return model->l1->weight.grad().defined() ? 0 : 1;
                }),
            0);
}

TEST(DdpEquivalence, DifferentModelsOnRanksAreAnError) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int rank, auto pg) {
                                  auto model = make_mlp(7, /*with_unused=*/rank == 1);  // rank 1 has one more layer
                                  try {
                                    ddp::DistributedDataParallel<MlpImpl> ddp_model(model, pg);
                                  } catch (const ddp::Error& e) {
                                    return std::string(e.what()).find("different models") != std::string::npos ? 0 : 1;
                                  }
                                  return 1;
                                }),
            0);
}

}  // namespace ddp_equivalence_tests
