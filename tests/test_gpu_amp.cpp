// Mixed precision on CUDA (issue 29's first item): written here, run when a GPU is lent; without one
// every test is SKIPPED with the reason. One GPU runs all but the two-GPU NCCL test:
//   * bf16 DDP, two ranks on one GPU over Gloo (and two NCCL ranks on two GPUs), equals bf16 in one
//     process within the CPU suite's tolerance, and closer than bf16 is to float32;
//   * fp16 with the scaler: an inf injected on one rank skips that step on every rank, and the scale
//     moves by PyTorch's rule (the rule the Python bridge test checks against torch.amp.GradScaler);
//     under ZeRO-2 an inf in one rank's gradient slice skips the step on both;
//   * ZeRO-2 in bf16 keeps parameters, buckets, gradient slices and Adam's moments in float32;
//   * no host synchronization in an fp16 step with the scaler (DDP with ddp::Sgd and ddp::Adadelta,
//     ZeRO-2 with ShardedAdamW, the course's workload), counted by CUDA's sync debug mode.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>

#include "amp_scenarios.h"
#include "course/options.h"
#include "course/sync_counter.h"
#include "course/workload.h"
#include "ddp/adadelta.h"
#include "ddp/autocast.h"
#include "ddp/grad_scaler.h"
#include "gpu_test_support.h"
#include "multiprocess.h"

using namespace gpu_test;

namespace {

constexpr double kBf16Tolerance = 2e-3;  // test_mixed_precision.cpp's, measured on the CPU

ddp_test::RankSetup ranks_on_one_gpu(int n) {
  ddp_test::RankSetup setup;
  setup.n = n;
  setup.device = "cuda:0";
  setup.backend = "gloo";  // Gloo: several ranks may share a GPU
  return setup;
}

#define REQUIRE_SYNC_COUNTER() \
  if (!ddpw::SyncCounter::available()) GTEST_SKIP() << "LibTorch built without CUDA: no sync debug mode"

TEST(GpuAmp, Bf16TwoRanksOnOneGpuOverGlooEqualOneProcess) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(ddp_test::run_ranks(ranks_on_one_gpu(2),
                                [](int r, auto pg) {
                                  return amp_scenarios::bf16_ddp_equals_one_process(r, pg, false, kBf16Tolerance);
                                }),
            0);
}

TEST(GpuAmp, Bf16TwoNcclRanksEqualOneProcess) {
  REQUIRE_GPUS(2);
  ddp_test::RankSetup setup;
  setup.n = 2;
  setup.device = "cuda";
  setup.backend = "nccl";
  EXPECT_EQ(ddp_test::run_ranks(setup,
                                [](int r, auto pg) {
                                  return amp_scenarios::bf16_ddp_equals_one_process(r, pg, false, kBf16Tolerance);
                                }),
            0);
}

TEST(GpuAmp, Bf16BucketsOnOneGpuCloseToOneProcess) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(ddp_test::run_ranks(
                ranks_on_one_gpu(2),
                [](int r, auto pg) { return amp_scenarios::bf16_ddp_equals_one_process(r, pg, true, kBf16Tolerance); }),
            0);
}

TEST(GpuAmp, Fp16InfOnOneRankSkipsTheStepOnEveryRankAndMovesTheScaleAsPyTorch) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(ddp_test::run_ranks(ranks_on_one_gpu(2),
                                [](int r, auto pg) {
                                  return amp_scenarios::fp16_ddp_skips_on_every_rank(r, pg, 1, {0, 4, 5, 11});
                                }),
            0);
}

TEST(GpuAmp, Fp16InfInOneRanksSliceSkipsZero2OnEveryRank) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(
      ddp_test::run_ranks(ranks_on_one_gpu(2),
                          [](int r, auto pg) { return amp_scenarios::fp16_zero_skips_on_every_rank(r, pg, 2, 0, 2); }),
      0);
}

TEST(GpuAmp, Bf16Zero2KeepsFloat32MasterState) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(ddp_test::run_ranks(ranks_on_one_gpu(2),
                                [](int r, auto pg) { return amp_scenarios::bf16_zero_keeps_fp32_master_state(r, pg); }),
            0);
  TempDir dir;  // and on NCCL, one rank
  auto pg = nccl_group_of_one(dir, ddp::choose_device("cuda", 0));
  EXPECT_EQ(amp_scenarios::bf16_zero_keeps_fp32_master_state(0, pg), 0);
}

// Counts the host synchronizations of `steps` fp16 steps after two warm-up steps (the first
// steps allocate and may read sizes).
template <typename Step>
int64_t syncs_in_steps(Step step, int steps = 5) {
  step(0);
  step(1);
  torch::cuda::synchronize();
  ddpw::SyncCounter syncs;
  syncs.start();
  for (int s = 2; s < 2 + steps; ++s) step(s);
  syncs.stop();
  return syncs.count();
}

TEST(GpuAmp, Fp16DdpStepWithTheScalerDoesNotSynchronize) {
  REQUIRE_GPUS(1);
  REQUIRE_SYNC_COUNTER();
  TempDir dir;
  const auto device = ddp::choose_device("cuda", 0);
  auto pg = nccl_group_of_one(dir, device);
  for (const bool adadelta : {false, true}) {
    auto net = amp_scenarios::make_mlp32(3, device);
    ddp::DistributedDataParallel<amp_scenarios::Mlp32Impl> model(net, pg);
    std::unique_ptr<torch::optim::Optimizer> opt;
    if (adadelta)
      opt = std::make_unique<ddp::Adadelta>(net->parameters(), 1.0);
    else
      opt = std::make_unique<ddp::Sgd>(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    auto scaler = std::make_shared<ddp::GradScaler>(device);
    dynamic_cast<ddp::SupportsAmpScaling&>(*opt).set_grad_scaler(scaler);
    const auto syncs = syncs_in_steps([&](int step) {
      opt->zero_grad();
      auto [x, y] = amp_scenarios::batch32(step, device);
      if (step == 3) x.index_put_({0, 0}, std::numeric_limits<float>::infinity());  // one skipped step among them
      torch::Tensor loss;
      {
        ddp::Autocast amp({.device_type = device.type(), .dtype = torch::kHalf});
        loss = torch::mse_loss(model->forward(x), y);
      }
      scaler->scale(loss).backward();
      opt->step();
    });
    EXPECT_EQ(syncs, 0) << (adadelta ? "Adadelta" : "Sgd");
    EXPECT_EQ(scaler->get_scale(), 32768.0) << "the injected inf should have halved the scale once";
  }
}

TEST(GpuAmp, Fp16Zero2StepWithTheScalerDoesNotSynchronize) {
  REQUIRE_GPUS(1);
  REQUIRE_SYNC_COUNTER();
  TempDir dir;
  const auto device = ddp::choose_device("cuda", 0);
  auto pg = nccl_group_of_one(dir, device);
  auto net = amp_scenarios::make_mlp32(4, device);
  ddp::ZeroOptions zo;
  zo.stage = 2;
  ddp::ZeroDataParallel<amp_scenarios::Mlp32Impl> model(net, pg, zo);
  ddp::ShardedAdamW opt(model, ddp::AdamOptions{});
  auto scaler = std::make_shared<ddp::GradScaler>(device);
  opt.set_grad_scaler(scaler);
  const auto syncs = syncs_in_steps([&](int step) {
    opt.zero_grad();
    auto [x, y] = amp_scenarios::batch32(step, device);
    torch::Tensor loss;
    {
      ddp::Autocast amp({.device_type = device.type(), .dtype = torch::kHalf});
      loss = torch::mse_loss(model->forward(x), y);
    }
    scaler->scale(loss).backward();
    opt.step();  // no clip_grad_norm: its norm is read on the host by design (DeepSpeed's too)
  });
  EXPECT_EQ(syncs, 0);
}

// The course's own path: --precision fp16 through make_workload (autocast in the model's forward,
// the scaling hook on the loss, the scaler attached to the workload's optimizer).
TEST(GpuAmp, CourseWorkloadInFp16DoesNotSynchronize) {
  REQUIRE_GPUS(1);
  REQUIRE_SYNC_COUNTER();
  TempDir dir;
  const auto device = ddp::choose_device("cuda", 0);
  auto pg = nccl_group_of_one(dir, device);
  ddpw::Options o;
  o.precision = "fp16";
  auto w = ddpw::make_workload(o);
  auto net = w.make_model(device);
  net->grad_scaler()->update(1024.0);  // 2^16 overflows this model's float16 gradients (as after a few backoffs)
  ddp::DistributedDataParallel<ddpw::Model> model(net, pg);
  auto opt = w.make_optimizer(*net);
  const auto& data = w.train.on(device);
  const auto syncs = syncs_in_steps([&](int step) {
    opt->zero_grad();
    const auto b = data.gather(torch::arange(step * 32, step * 32 + 32, torch::TensorOptions().device(device)));
    w.loss(model->forward(b.input), b.target).backward();
    opt->step();
  });
  EXPECT_EQ(syncs, 0);
  EXPECT_EQ(net->grad_scaler()->state().growth_tracker, 7) << "every step applied";
}

}  // namespace
