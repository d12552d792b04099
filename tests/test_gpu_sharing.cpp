// Whether ranks may share a GPU, from every rank's (host, PCI bus id, machine id): refused only for
// NCCL, and decided by the physical GPU, not by the "cuda:N" each rank sees.
#include <gtest/gtest.h>

#include "ddp/detail/gpu_sharing.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace {

const std::string kGpuA = "0000:3b:00.0", kGpuB = "0000:5e:00.0";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(GpuSharing, CpuRanksShareNothing) {
  const std::vector<ddp::GpuClaim> claims{{"node1", ""}, {"node1", ""}, {"node1", ""}};
  EXPECT_TRUE(ddp::shared_gpus(claims).empty());
  const auto v = ddp::judge_gpu_sharing("gloo", claims);
  EXPECT_FALSE(v.refused);
  EXPECT_EQ(v.note, "");
}

// Per-task CUDA_VISIBLE_DEVICES: every rank sees "cuda:0", but the bus ids differ.
TEST(GpuSharing, OneGpuPerTaskIsFineEvenIfEachSeesCuda0) {
  const std::vector<ddp::GpuClaim> claims{{"node1", kGpuA}, {"node1", kGpuB}};
  const auto v = ddp::judge_gpu_sharing("nccl", claims);
  EXPECT_FALSE(v.refused) << v.what;
  EXPECT_EQ(v.note, "");
}

// Two tasks whose CUDA_VISIBLE_DEVICES name the same GPU: NCCL would fail later with "Duplicate GPU
// detected"; refused now, naming the ranks, the GPU and the host.
TEST(GpuSharing, NcclRefusesTwoRanksOnOneGpu) {
  const std::vector<ddp::GpuClaim> claims{{"node1", kGpuA}, {"node1", kGpuA}};
  const auto v = ddp::judge_gpu_sharing("nccl", claims);
  ASSERT_TRUE(v.refused);
  EXPECT_TRUE(contains(v.what, "ranks would share a GPU under NCCL")) << v.what;
  EXPECT_TRUE(contains(v.what, "ranks 0-1 on GPU 0000:3b:00.0 of node1")) << v.what;
  EXPECT_TRUE(contains(v.what, "Duplicate GPU detected")) << v.what;
  EXPECT_TRUE(contains(v.hint, ddp::setting_value(ddp::Setting::kBackend, "gloo"))) << v.hint;
  EXPECT_TRUE(contains(v.hint, "--ntasks-per-node")) << v.hint;
}

// Gloo copies CUDA tensors through the host: any number of ranks per GPU works.
TEST(GpuSharing, GlooAllowsSharingWithANote) {
  const std::vector<ddp::GpuClaim> claims{{"node1", kGpuA}, {"node1", kGpuA}};
  const auto v = ddp::judge_gpu_sharing("gloo", claims);
  EXPECT_FALSE(v.refused);
  EXPECT_TRUE(contains(v.note, "ranks 0-1 on GPU 0000:3b:00.0 of node1")) << v.note;
  EXPECT_TRUE(contains(v.note, "fine for gloo")) << v.note;
}

// The same bus id on two machines is two GPUs.
TEST(GpuSharing, TheSameBusIdOnAnotherHostIsAnotherGpu) {
  const std::vector<ddp::GpuClaim> claims{{"node1", kGpuA}, {"node2", kGpuA}};
  EXPECT_FALSE(ddp::judge_gpu_sharing("nccl", claims).refused);
}

// --device cuda:0 with four local ranks on two nodes, plus a CPU rank: each shared GPU is named once.
TEST(GpuSharing, EverySharedGpuIsNamed) {
  const std::vector<ddp::GpuClaim> claims{{"n1", kGpuA}, {"n1", kGpuA}, {"n2", kGpuA}, {"n2", kGpuA},
                                          {"n2", ""},    {"n1", kGpuB}, {"n1", kGpuA}};
  const auto shared = ddp::shared_gpus(claims);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared[0].host, "n1");
  EXPECT_EQ(shared[0].ranks, (std::vector<int>{0, 1, 6}));
  EXPECT_EQ(shared[1].host, "n2");
  EXPECT_EQ(shared[1].ranks, (std::vector<int>{2, 3}));
  const auto v = ddp::judge_gpu_sharing("nccl", claims);
  EXPECT_TRUE(contains(v.what, "ranks 0-1,6 on GPU 0000:3b:00.0 of n1; ranks 2-3 on GPU 0000:3b:00.0 of n2")) << v.what;
}

// Containers on two nodes with one host name (a fixed --hostname, identical pod names) and GPUs at
// the same bus id: two machines, as NCCL tells them apart (host name + boot id, or NCCL_HOSTID),
// so not refused. The same boot id is one machine: refused. Both claims with no id: the host decides.
TEST(GpuSharing, OneHostNameOnTwoMachinesIsTwoMachines) {
  const std::string boot1 = "5f1c2a0e-1d2b-4c3a-9e8f-000000000001", boot2 = "5f1c2a0e-1d2b-4c3a-9e8f-000000000002";
  const std::vector<ddp::GpuClaim> two_machines{{"trainer", kGpuA, boot1}, {"trainer", kGpuA, boot2}};
  EXPECT_TRUE(ddp::shared_gpus(two_machines).empty());
  EXPECT_FALSE(ddp::judge_gpu_sharing("nccl", two_machines).refused);
  const std::vector<ddp::GpuClaim> one_machine{{"trainer", kGpuA, boot1}, {"trainer", kGpuA, boot1}};
  EXPECT_TRUE(ddp::judge_gpu_sharing("nccl", one_machine).refused);
  const std::vector<ddp::GpuClaim> unknown{{"trainer", kGpuA, ""}, {"trainer", kGpuA, ""}};
  EXPECT_TRUE(ddp::judge_gpu_sharing("nccl", unknown).refused);
}

TEST(GpuSharing, RanksTextIsCompact) {
  EXPECT_EQ(ddp::ranks_text({}), "");
  EXPECT_EQ(ddp::ranks_text({3}), "3");
  EXPECT_EQ(ddp::ranks_text({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

}  // namespace
