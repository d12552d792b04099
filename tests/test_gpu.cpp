// On a machine with an NVIDIA GPU: the CUDA/NCCL paths (device binding, an NCCL group of one
// rank, DDP on CUDA equal to plain training). Without a GPU every test here is SKIPPED, not passed.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include "ddp/device.h"
#include "ddp/error.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/files.h"
#include "ddp/process_group.h"

namespace {

#define REQUIRE_GPU()                                                           \
  do {                                                                          \
    if (ddp::visible_gpus() == 0) GTEST_SKIP() << "no CUDA GPU visible";        \
  } while (0)

std::shared_ptr<ddp::ProcessGroup> nccl_group_of_one(const std::string& dir, torch::Device device) {
  ddp::LaunchEnv launch;
  launch.init_method = "file://" + dir + "/store";
  ddp::ProcessGroupOptions options;
  options.backend = "nccl";
  options.rendezvous_timeout = options.collective_timeout = std::chrono::seconds(60);
  return ddp::init_process_group(launch, device, options);
}

}  // namespace

TEST(Gpu, DeviceFollowsTheLocalRank) {
  REQUIRE_GPU();
  const auto device = ddp::choose_device("auto", 0, 1);
  EXPECT_TRUE(device.is_cuda());
  EXPECT_EQ(device.index(), 0);
  EXPECT_NE(ddp::device_name(device).find("cuda:0"), std::string::npos);
}

// More ranks on a node than GPUs: a clear error before any NCCL work, not "Duplicate GPU detected".
TEST(Gpu, MoreRanksThanGpusIsAClearError) {
  REQUIRE_GPU();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = visible ? visible : "";
  ::unsetenv("CUDA_VISIBLE_DEVICES");  // (one visible GPU per task would be allowed)
  try {
    ddp::choose_device("auto", 0, ddp::visible_gpus() + 1);
    ADD_FAILURE() << "no error for more ranks than GPUs";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks would share a GPU"), std::string::npos) << e.what();
  }
  if (visible) ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
}

TEST(Gpu, NcclAllreduceOfOneRank) {
  REQUIRE_GPU();
  char dir[] = "/tmp/ddpw-gpu-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const auto device = ddp::choose_device("cuda", 0, 1);
  auto pg = nccl_group_of_one(dir, device);
  EXPECT_EQ(pg->backend_name(), "nccl");
  auto t = torch::arange(1024, torch::TensorOptions().device(device).dtype(torch::kFloat32));
  pg->allreduce_sum(t, "test allreduce");
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(1024, torch::kFloat32)));
  ddp::remove_tree(dir);
}

TEST(Gpu, DdpOnCudaEqualsPlainTraining) {
  REQUIRE_GPU();
  char dir[] = "/tmp/ddpw-gpu-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const auto device = ddp::choose_device("cuda", 0, 1);
  auto pg = nccl_group_of_one(dir, device);
  torch::manual_seed(3);
  auto model = std::make_shared<torch::nn::LinearImpl>(64, 8);
  torch::manual_seed(3);
  auto reference = std::make_shared<torch::nn::LinearImpl>(64, 8);
  model->to(device);
  reference->to(device);
  ddp::DistributedDataParallel<torch::nn::LinearImpl> ddp_model(model, pg);
  torch::optim::SGD opt(model->parameters(), 0.1), ref_opt(reference->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    auto x = torch::randn({32, 64}, device), y = torch::randn({32, 8}, device);
    opt.zero_grad();
    ref_opt.zero_grad();
    torch::mse_loss(ddp_model->forward(x), y).backward();
    torch::mse_loss(reference->forward(x), y).backward();
    opt.step();
    ref_opt.step();
  }
  EXPECT_LT((model->weight - reference->weight).abs().max().item<float>(), 1e-6);
  ddp::remove_tree(dir);
}
