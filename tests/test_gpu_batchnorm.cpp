// SyncBatchNorm and DDP's buffers on CUDA (label gpu; SKIPPED without enough GPUs, never passed):
//   * two ranks sharing one GPU over Gloo (CUDA tensors) compute BatchNorm over all their batches
//     (the CPU scenarios of batchnorm_scenarios.h, on the device);
//   * NCCL, one GPU per rank (2 GPUs; the 3-rank scenarios with 3): the same, and DDP over a
//     converted model equals one process on the whole batch (buffers broadcast over NCCL too);
//   * Python's real torch.nn.SyncBatchNorm (CUDA only in PyTorch) on the same inputs gives what ours
//     gives: outputs, input gradients, this rank's weight and bias gradients, running statistics
//     (Gloo when the ranks share a GPU, NCCL with a GPU each).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "batchnorm_scenarios.h"
#include "ddp/device.h"
#include "ddp/spawn.h"
#include "gpu_test_support.h"
#include "multiprocess.h"

namespace gpu_batchnorm_tests {

#ifdef DDPW_TEST_PYTHON
const char* const kPython = DDPW_TEST_PYTHON;
#else
const char* const kPython = "";
#endif

// Every scenario of `world` ranks: rank r on GPU r % count, over `backend`.
int run_configs(int world, const std::string& device, const std::string& backend) {
  int failures = 0;
  for (const auto& config : bn_scenarios::configs()) {
    if (static_cast<int>(config.sizes.size()) != world) continue;
    ddp_test::RankSetup setup;
    setup.n = world;
    setup.device = device;
    setup.backend = backend;
    setup.phase = config.name;
    failures += ddp_test::run_ranks(setup, [&](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
      const auto inputs = bn_scenarios::make_inputs(config);
      return bn_scenarios::run_rank(config, rank, pg, inputs, bn_scenarios::reference(config, inputs), true);
    });
  }
  return failures;
}

TEST(GpuSyncBatchNorm, TwoRanksSharingAGpuOverGlooEqualBatchNorm) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_configs(2, "cuda:0", "gloo"), 0);
}

TEST(GpuSyncBatchNorm, NcclTwoRanksEqualBatchNorm) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(run_configs(2, "cuda", "nccl"), 0);
}

TEST(GpuSyncBatchNorm, NcclThreeRanksEqualBatchNorm) {
  REQUIRE_GPUS(3);
  EXPECT_EQ(run_configs(3, "cuda", "nccl"), 0);
}

TEST(GpuSyncBatchNorm, NcclDdpOverConvertedModelEqualsOneProcess) {
  REQUIRE_GPUS(2);
  ddp_test::RankSetup setup;
  setup.device = "cuda";
  setup.backend = "nccl";
  EXPECT_EQ(ddp_test::run_ranks(setup,
                                [](int r, auto pg) {
                                  return bn_scenarios::train_with_sync_batchnorm(r, pg, {5, 2});
                                }),
            0);
}

TEST(GpuSyncBatchNorm, GlooCudaDdpOverConvertedModelEqualsOneProcess) {
  REQUIRE_GPUS(1);
  ddp_test::RankSetup setup;
  setup.device = "cuda:0";
  setup.backend = "gloo";
  EXPECT_EQ(ddp_test::run_ranks(setup,
                                [](int r, auto pg) {
                                  return bn_scenarios::train_with_sync_batchnorm(r, pg, {5, 2});
                                }),
            0);
}

// Python's torch.nn.SyncBatchNorm, one process per rank, against ours, rank by rank.
TEST(GpuSyncBatchNorm, SameAsPythonsSyncBatchNorm) {
  REQUIRE_GPUS(1);
  if (std::string(kPython).empty())
    GTEST_SKIP() << "no python3 with torch was found by the configure (run scripts/setup.sh)";
  const std::string dir = ddp_test::shared_test_dir();
  ASSERT_FALSE(dir.empty());
  const auto configs = bn_scenarios::configs();
  int failures = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto& config = configs[i];
    const int world = static_cast<int>(config.sizes.size());
    const std::string backend = ddp::visible_gpus() >= world ? "nccl" : "gloo";
    const std::string folder = dir + "/" + std::to_string(i);
    if (!ddp::is_spawned_worker()) {
      ASSERT_EQ(::mkdir(folder.c_str(), 0700), 0);
      std::ofstream(folder + "/inputs.pt", std::ios::binary)
          << ddp::tensor_dict_to_bytes(bn_scenarios::make_inputs(config));
      const std::string command = "timeout 300 '" + std::string(kPython) + "' '" + DDPW_TEST_PYTHON_DIR +
                                  "/sync_batchnorm_reference.py' sync '" + folder + "' " + backend + " > /dev/null";
      const int status = std::system(command.c_str());
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << config.name << ": Python's SyncBatchNorm run failed";
    }
    ddp_test::RankSetup setup;
    setup.n = world;
    setup.device = backend == "nccl" ? "cuda" : "cuda:0";
    setup.backend = backend;
    setup.phase = config.name;
    failures += ddp_test::run_ranks(setup, [&](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
      auto read = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        return ddp::tensor_dict_from_bytes(std::string(std::istreambuf_iterator<char>(in), {}), path);
      };
      return bn_scenarios::run_rank(config, rank, pg, read(folder + "/inputs.pt"),
                                    read(folder + "/python.rank" + std::to_string(rank) + ".pt"), false);
    });
  }
  EXPECT_EQ(failures, 0);
  if (!ddp::is_spawned_worker()) ddp::remove_tree(dir);
}

}  // namespace gpu_batchnorm_tests
