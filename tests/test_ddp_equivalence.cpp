// DistributedDataParallel is proven equal to single-process training: N ranks (separate processes,
// Gloo) training on shards of each batch end with the parameters of one process training on the
// whole batch, after 25 optimizer steps, for a float64 multi-layer model spread over several
// buckets (the scenarios are in ddp_scenarios.h; the GPU suite runs them on CUDA tensors). Each
// rank computes the single-process reference itself (no communication), so the comparison is
// independent of the code under test. TensorDataParallel (DDP over a list of tensors) is checked
// against the module form, step by step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

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

// TensorDataParallel: the MLP's weights as plain tensors (fresh leaves, no module), a functional
// forward over them, and the same training as DistributedDataParallel on the module: micro-batches
// under no_sync, several buckets. Both end equal to each other and to one process on the whole batch.
int tensors_equal_module(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  constexpr int kMicro = 2;
  const int world = pg->size();
  auto model = make_mlp(100 + rank);  // every rank starts apart: both wraps must give rank 0's weights
  auto reference = make_mlp(100);
  std::vector<torch::Tensor> params;
  for (const auto& p : make_mlp(100 + rank)->parameters()) params.push_back(p.detach().clone().requires_grad_(true));
  ddp::DdpOptions options;
  options.bucket_mb = 0.02;  // several buckets, as the module form
  ddp::DistributedDataParallel<MlpImpl> ddp_model(model, pg, options);
  ddp::TensorDataParallel ddp_tensors(params, pg, options);
  if (ddp_tensors.bucket_count() != ddp_model.bucket_count() || ddp_tensors.bucket_count() < 3) {
    std::fprintf(stderr, "buckets: %zu over tensors, %zu over the module\n", ddp_tensors.bucket_count(),
                 ddp_model.bucket_count());
    return 1;
  }
  // l1.weight, l1.bias, ..., l4.bias: the module's registration order.
  auto forward = [&](const torch::Tensor& x) {
    auto h = x;
    for (size_t layer = 0; layer < 4; ++layer) {
      h = torch::linear(h, params[2 * layer], params[2 * layer + 1]);
      if (layer < 3) h = torch::tanh(h);
    }
    return h;
  };
  auto difference = [&](torch::nn::Module& m) {
    double worst = 0;
    const auto mp = m.parameters();
    for (size_t i = 0; i < params.size(); ++i) worst = std::max(worst, (params[i] - mp[i]).abs().max().item<double>());
    return worst;
  };
  if (difference(*reference) != 0) {
    std::fprintf(stderr, "rank %d: the tensors differ from rank 0's after the wrap\n", rank);
    return 1;
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD tensor_opt(ddp_tensors.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  double worst_step = 0;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    tensor_opt.zero_grad();
    ref_opt.zero_grad();
    for (int m = 0; m < kMicro; ++m) {
      auto [x, y] = batch(step * kMicro + m);
      const auto xs = shard(x, rank, world), ys = shard(y, rank, world);
      if (m + 1 < kMicro) {
        auto pause_module = ddp_model.no_sync();
        auto pause_tensors = ddp_tensors.no_sync();
        torch::mse_loss(ddp_model->forward(xs), ys).backward();
        torch::mse_loss(forward(xs), ys).backward();
      } else {
        torch::mse_loss(ddp_model->forward(xs), ys).backward();
        torch::mse_loss(forward(xs), ys).backward();
      }
      torch::mse_loss(reference->forward(x), y).backward();
    }
    opt.step();
    tensor_opt.step();
    ref_opt.step();
    worst_step = std::max(worst_step, difference(*model));
  }
  const double to_reference = difference(*reference), moved = max_difference(*make_mlp(100), *reference);
  std::printf(
      "rank %d of %d: max |tensors - module| = %.3g over %d steps, |tensors - single process| = %.3g, "
      "weights moved by up to %.3g\n",
      rank, world, worst_step, kSteps, to_reference, moved);
  return worst_step <= kTolerance && to_reference <= kTolerance && moved > 1e-3 ? 0 : 1;
}

TEST(DdpEquivalence, TensorListEqualsModuleForm) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return tensors_equal_module(r, pg); }), 0);
}

TEST(DdpEquivalence, TensorListRefusesWhatIsNotAParameter) {
  EXPECT_EQ(ddp_test::run_ranks(1,
                                [](int, auto pg) {
                                  auto w = torch::ones({3}, torch::requires_grad());
                                  auto refused = [&](std::vector<torch::Tensor> params, const std::string& what) {
                                    try {
                                      ddp::TensorDataParallel ddp_tensors(std::move(params), pg);
                                    } catch (const ddp::Error& e) {
                                      if (std::string(e.what()).find(what) != std::string::npos) return true;
                                      std::fprintf(stderr, "unexpected error: %s\n", e.what());
                                      return false;
                                    }
                                    std::fprintf(stderr, "no error for: %s\n", what.c_str());
                                    return false;
                                  };
                                  const bool ok = refused({w, w * 2}, "params[1] is not a leaf tensor") &&
                                                  refused({w, torch::ones({2})}, "params[1] is not a leaf tensor") &&
                                                  refused({w, w}, "params[1] is params[0] again") &&
                                                  refused({}, "got no parameter tensors");
                                  return ok ? 0 : 1;
                                }),
            0);
}

}  // namespace ddp_equivalence_tests
