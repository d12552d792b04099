// On a machine with an NVIDIA GPU: FullyShardedDataParallel on CUDA tensors (the CPU scenarios of
// fsdp_scenarios.h on the device). Without a GPU every test is SKIPPED with the reason, never passed.
//   * two ranks sharing one GPU over Gloo: equal one process within 1e-6 (float32), with and without
//     reshard-after-forward, with checkpointing, with no_sync accumulation;
//   * one NCCL rank computing in bfloat16 (param_dtype) and reducing in float32, its collectives kept
//     (collectives_at_world_size_1: the all-gathers and the float32 reduce-scatters run on NCCL's
//     stream): the shards stay float32, the result stays within 3e-2 of the float32 run, and the
//     gathered state_dict is float32; then a save and a load of the sharded snapshot (its vote and
//     generation travel on the GPU);
//   * 2 and 4 NCCL ranks, one GPU each: equal one process within 1e-6 (float32), the model built on
//     the host and wrapped with its device.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "ddp/files.h"
#include "fsdp_scenarios.h"
#include "gpu_test_support.h"
#include "multiprocess.h"

namespace gpu_fsdp {

using namespace fsdp_scenarios;

TEST(GpuFullySharded, TwoRanksOnOneGpuOverGlooEqualOneProcess) {
  REQUIRE_GPUS(1);
  ddp_test::RankSetup setup;
  setup.n = 2;
  setup.device = "cuda:0";
  setup.backend = "gloo";
  EXPECT_EQ(ddp_test::run_ranks(setup, equals_one_process), 0);
}

TEST(GpuFullySharded, OneNcclRankBf16ComputeFloat32Reduce) {
  REQUIRE_GPUS(1);
  ddp_test::RankSetup setup;
  setup.n = 1;
  setup.device = "cuda:0";
  setup.backend = "nccl";
  setup.collectives_at_world_size_1 = true;
  const std::string dir = ddp_test::shared_test_dir();
  ASSERT_FALSE(dir.empty());
  EXPECT_EQ(ddp_test::run_ranks(setup,
                                [&](int, auto pg) {
                                  ddp::FullyShardedOptions o;
                                  o.param_dtype = torch::kBFloat16;
                                  o.reduce_dtype = torch::kFloat32;
                                  const auto bf16 = train_fsdp(pg, Variant{"bf16"}, 3, o);
                                  const auto fp32 = reference(3, 1, pg->device());
                                  const double diff = max_difference(bf16, fp32);
                                  std::printf("bf16 compute vs float32: max difference %.3g (bound 3e-2)\n", diff);
                                  const bool float32 = bf16.front().second.scalar_type() == torch::kFloat32;
                                  // The sharded snapshot on NCCL: saved and loaded back.
                                  auto net = make_net();  // on the host
                                  o.device = pg->device();
                                  ddp::FullyShardedDataParallel<TinyNetImpl> model(net, units_of(*net), pg, o);
                                  ddp::ShardedAdamW optimizer(model, kAdam);
                                  ddp::save_sharded_snapshot(dir + "/fsdp.json", optimizer, {.epochs_run = 1});
                                  const auto state = ddp::load_sharded_snapshot(dir + "/fsdp.json", optimizer);
                                  return diff <= 3e-2 && diff > 0 && float32 && state && state->epochs_run == 1 ? 0 : 1;
                                }),
            0);
  ddp::remove_tree(dir);
}

namespace {
int fsdp_on_nccl(int ranks) {
  ddp_test::RankSetup setup;
  setup.n = ranks;
  setup.device = "cuda";  // the local rank's GPU
  setup.backend = "nccl";
  return ddp_test::run_ranks(setup, equals_one_process);
}
}  // namespace

TEST(GpuFullySharded, TwoNcclRanksEqualOneProcess) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(fsdp_on_nccl(2), 0);
}

TEST(GpuFullySharded, FourNcclRanksEqualOneProcess) {
  REQUIRE_GPUS(4);
  EXPECT_EQ(fsdp_on_nccl(4), 0);
}

}  // namespace gpu_fsdp
