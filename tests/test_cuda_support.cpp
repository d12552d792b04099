// Can this LibTorch run on this GPU with this driver: the arch list as LibTorch reports it, the
// verdict (ok, no kernels, driver too old) and the torch 2.11 build each failure names.
#include <gtest/gtest.h>

#include "ddp/detail/cuda_support.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace {

using ddp::CudaSupport;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// torch 2.11's wheels for Linux x86_64, as torch.cuda.get_arch_list() reports them (cu130: read
// from the wheel the set-up installs; cu128 and cu126: PyTorch's support matrix for 2.11).
const std::vector<std::string> kCu130 = {"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"};
const std::vector<std::string> kCu128 = kCu130;
const std::vector<std::string> kCu126 = {"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"};

ddp::CudaSupportInput gpu(int capability, const std::string& name, std::vector<std::string> archs, int driver,
                          int torch_cuda, const std::string& version) {
  ddp::CudaSupportInput in;
  in.capability = capability;
  in.gpu_name = name;
  in.arch_list = std::move(archs);
  in.driver_cuda = driver;
  in.torch_cuda = torch_cuda;
  in.torch_version = version;
  return in;
}

TEST(CudaSupport, ParsesNvccGencodeFlagsKeepingOnlyWhatTheLibraryCarries) {
  // LibTorch's build settings line: arch= is the virtual arch compiled from, code= the images.
  const auto archs = ddp::parse_arch_flags(
      " -gencode;arch=compute_70,code=sm_70;-gencode;arch=compute_80,code=sm_80;"
      "-gencode;arch=compute_86,code=sm_86;-gencode;arch=compute_86,code=compute_86\n");
  EXPECT_EQ(archs, (std::vector<std::string>{"sm_70", "sm_80", "sm_86", "compute_86"}));
  EXPECT_EQ(ddp::parse_arch_flags("-gencode arch=compute_90a,code=[sm_90a,compute_90a]"),
            (std::vector<std::string>{"sm_90a", "compute_90a"}));
}

TEST(CudaSupport, ParsesThePythonList) {
  EXPECT_EQ(ddp::parse_arch_flags("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"), kCu130);
  EXPECT_EQ(ddp::parse_arch_flags("['sm_75', 'sm_80', 'compute_120']"),
            (std::vector<std::string>{"sm_75", "sm_80", "compute_120"}));
  EXPECT_TRUE(ddp::parse_arch_flags("").empty());
  EXPECT_TRUE(ddp::parse_arch_flags("none of these").empty());
}

TEST(CudaSupport, VersionTexts) {
  EXPECT_EQ(ddp::cuda_version_text(12040), "12.4");
  EXPECT_EQ(ddp::cuda_version_text(13000), "13.0");
  EXPECT_EQ(ddp::cuda_version_text(12080), "12.8");
  EXPECT_EQ(ddp::sm_name(70), "sm_70");
  EXPECT_EQ(ddp::sm_name(120), "sm_120");
}

TEST(CudaSupport, H100WithTheDefaultBuildAndAnR580DriverIsFine) {
  const auto v = ddp::judge_cuda_support(gpu(90, "NVIDIA H100 80GB HBM3", kCu130, 13000, 13000, "2.11.0+cu130"));
  EXPECT_EQ(v.verdict, CudaSupport::kOk) << v.summary;
  EXPECT_TRUE(contains(v.summary, "NVIDIA H100 80GB HBM3 (sm_90): kernels sm_90 of LibTorch 2.11.0+cu130"))
      << v.summary;
  EXPECT_TRUE(contains(v.summary, "driver CUDA 13.0, LibTorch CUDA 13.0")) << v.summary;
  EXPECT_TRUE(v.what.empty());
}

// A binary kernel image runs on later minors of its major: sm_86 serves an L4/L40 (8.9), sm_120 a
// GB10 (12.1), sm_100 a B300 (10.3); never across majors.
TEST(CudaSupport, KernelsOfAnEarlierMinorServeTheSameMajor) {
  auto v = ddp::judge_cuda_support(gpu(89, "NVIDIA L4", kCu130, 13000, 13000, "2.11.0+cu130"));
  EXPECT_EQ(v.verdict, CudaSupport::kOk);
  EXPECT_TRUE(contains(v.summary, "kernels sm_86")) << v.summary;
  v = ddp::judge_cuda_support(gpu(103, "B300", kCu130, 13000, 13000, "2.11.0+cu130"));
  EXPECT_TRUE(contains(v.summary, "kernels sm_100")) << v.summary;
  v = ddp::judge_cuda_support(gpu(86, "A40", {"not-an-arch", "sm_80", "sm_86"}, 13000, 13000, "x"));
  EXPECT_TRUE(contains(v.summary, "kernels sm_86 of")) << v.summary;  // an entry it cannot read changes nothing
  v = ddp::judge_cuda_support(gpu(90, "H100", {"sm_80", "sm_86"}, 13000, 13000, "x"));
  EXPECT_EQ(v.verdict, CudaSupport::kNoKernels) << "sm_86 kernels must not count for sm_90";
}

// Puhti and SuperCloud: V100 (sm_70). torch 2.11's cu128 and cu130 start at sm_75.
TEST(CudaSupport, V100WithTheDefaultBuildHasNoKernelsAndIsToldCu126) {
  const auto v = ddp::judge_cuda_support(gpu(70, "Tesla V100-SXM2-32GB", kCu130, 13000, 13000, "2.11.0+cu130"));
  ASSERT_EQ(v.verdict, CudaSupport::kNoKernels);
  EXPECT_TRUE(contains(v.what,
                       "Tesla V100-SXM2-32GB (sm_70) has no kernels in this LibTorch (2.11.0+cu130), "
                       "built for sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"))
      << v.what;
  EXPECT_TRUE(contains(v.what, "no kernel image is available for execution on the device")) << v.what;
  EXPECT_TRUE(contains(v.hint, "install the cu126 build of torch 2.11.0, which has kernels for sm_70")) << v.hint;
  EXPECT_EQ(v.build, "cu126");
  // The library speaks of torch's builds only, not of a set-up script (the course adds that).
  EXPECT_FALSE(contains(v.hint, "setup.sh")) << v.hint;
  EXPECT_TRUE(contains(v.summary, "FAILED")) << v.summary;
}

TEST(CudaSupport, V100WithCu128IsToldCu126AndWithCu126IsFine) {
  auto v = ddp::judge_cuda_support(gpu(70, "Tesla V100", kCu128, 12040, 12080, "2.11.0+cu128"));
  ASSERT_EQ(v.verdict, CudaSupport::kNoKernels);
  EXPECT_TRUE(contains(v.hint, "cu126")) << v.hint;
  v = ddp::judge_cuda_support(gpu(70, "Tesla V100", kCu126, 12040, 12060, "2.11.0+cu126"));
  EXPECT_EQ(v.verdict, CudaSupport::kOk) << v.summary;
  EXPECT_TRUE(contains(v.summary, "kernels sm_70")) << v.summary;
}

// cu130 needs a driver of CUDA 13 (R580+). An A100 node whose driver says CUDA 12.4 sees no GPU
// at all under a cu130 LibTorch: told the cu128 build, which that driver runs.
TEST(CudaSupport, DriverOfAnOlderCudaMajorIsTooOldAndNamesABuildItRuns) {
  const auto v = ddp::judge_cuda_support(gpu(80, "NVIDIA A100-SXM4-40GB", kCu130, 12040, 13000, "2.11.0+cu130"));
  ASSERT_EQ(v.verdict, CudaSupport::kDriverTooOld);
  EXPECT_TRUE(contains(v.what,
                       "the NVIDIA driver supports CUDA up to 12.4, but this LibTorch (2.11.0+cu130) is "
                       "built for CUDA 13.0, which needs driver release 580 or newer"))
      << v.what;
  EXPECT_TRUE(contains(v.what, "nvidia-smi")) << v.what;
  EXPECT_TRUE(contains(v.hint, "install the cu128 build of torch 2.11.0, which this driver runs")) << v.hint;
  EXPECT_EQ(v.build, "cu128");
}

// With the driver too old, the runtime reports no GPU: the verdict still names the cause.
TEST(CudaSupport, NoGpuSeenBecauseTheDriverIsTooOld) {
  ddp::CudaSupportInput in;
  in.driver_cuda = 12020;
  in.torch_cuda = 13000;
  in.torch_version = "2.11.0+cu130";
  const auto v = ddp::judge_cuda_support(in);
  ASSERT_EQ(v.verdict, CudaSupport::kDriverTooOld);
  EXPECT_TRUE(contains(v.hint, "cu128")) << v.hint;
}

// Minor version compatibility: a CUDA 12.4 driver runs a cu128 LibTorch's kernel images.
TEST(CudaSupport, OlderMinorOfTheSameMajorIsFineForKernelImages) {
  const auto v = ddp::judge_cuda_support(gpu(80, "A100", kCu128, 12040, 12080, "2.11.0+cu128"));
  EXPECT_EQ(v.verdict, CudaSupport::kOk) << v.summary;
}

// PTX (compute_XX) is compiled by the driver for newer GPUs, but only by a driver at least as new
// as the CUDA that wrote it.
TEST(CudaSupport, PtxServesNewerGpusOnlyWithADriverAsNewAsLibTorchsCuda) {
  const std::vector<std::string> archs = {"sm_80", "sm_90", "compute_90"};
  auto v = ddp::judge_cuda_support(gpu(120, "RTX PRO 6000", archs, 13000, 13000, "x"));
  EXPECT_EQ(v.verdict, CudaSupport::kOk) << v.summary;
  EXPECT_TRUE(contains(v.summary, "PTX compute_90")) << v.summary;
  v = ddp::judge_cuda_support(gpu(120, "RTX PRO 6000", archs, 12080, 12090, "x"));
  ASSERT_EQ(v.verdict, CudaSupport::kDriverTooOld);
  EXPECT_TRUE(contains(v.what, "only PTX (compute_90)")) << v.what;
  // PTX of a newer arch does not serve an older GPU.
  v = ddp::judge_cuda_support(gpu(75, "T4", {"sm_80", "compute_80"}, 13000, 13000, "x"));
  EXPECT_EQ(v.verdict, CudaSupport::kNoKernels);
}

TEST(CudaSupport, ArchSpecificImagesRunOnThatArchOnly) {
  EXPECT_EQ(ddp::judge_cuda_support(gpu(90, "H100", {"sm_90a"}, 13000, 13000, "x")).verdict, CudaSupport::kOk);
  EXPECT_EQ(ddp::judge_cuda_support(gpu(100, "B200", {"sm_90a"}, 13000, 13000, "x")).verdict, CudaSupport::kNoKernels);
}

TEST(CudaSupport, UnknownWhenThereIsNothingToJudge) {
  EXPECT_EQ(ddp::judge_cuda_support({}).verdict, CudaSupport::kUnknown);  // no GPU, no driver: a CPU machine
  const auto v = ddp::judge_cuda_support(gpu(90, "H100", {}, 13000, 13000, "x"));
  EXPECT_EQ(v.verdict, CudaSupport::kUnknown);
  EXPECT_TRUE(contains(v.summary, "arch list unknown")) << v.summary;
}

TEST(CudaSupport, SuggestsTheNewestBuildWithKernelsThatTheDriverRuns) {
  EXPECT_EQ(ddp::suggest_torch_build(70, 13000, "x86_64"), "cu126");  // V100: only cu126
  EXPECT_EQ(ddp::suggest_torch_build(70, 0, "x86_64"), "cu126");
  EXPECT_EQ(ddp::suggest_torch_build(80, 13000, "x86_64"), "cu130");   // A100 on an R580 driver
  EXPECT_EQ(ddp::suggest_torch_build(80, 12040, "x86_64"), "cu128");   // A100 on a CUDA 12 driver
  EXPECT_EQ(ddp::suggest_torch_build(86, 12020, "x86_64"), "cu128");   // A40
  EXPECT_EQ(ddp::suggest_torch_build(61, 12020, "x86_64"), "cu126");   // Pascal
  EXPECT_EQ(ddp::suggest_torch_build(90, 13000, "aarch64"), "cu130");  // GH200 (Roihu)
  EXPECT_EQ(ddp::suggest_torch_build(90, 12040, "aarch64"), "cu128");
  EXPECT_EQ(ddp::suggest_torch_build(121, 13000, "aarch64"), "cu130");  // GB10: sm_120 images
  EXPECT_EQ(ddp::suggest_torch_build(70, 13000, "aarch64"), "");        // no Volta in aarch64 builds
  EXPECT_EQ(ddp::suggest_torch_build(37, 12000, "x86_64"), "");         // Kepler: none
  EXPECT_EQ(ddp::suggest_torch_build(70, 11080, "x86_64"), "");         // a CUDA 11 driver runs none
}

TEST(CudaSupport, AGpuNoBuildServesSaysSo) {
  ddp::CudaSupportInput in = gpu(70, "Tesla V100", {"sm_80", "sm_90"}, 13000, 13000, "2.11.0+cu130");
  in.machine = "aarch64";
  const auto v = ddp::judge_cuda_support(in);
  ASSERT_EQ(v.verdict, CudaSupport::kNoKernels);
  EXPECT_TRUE(contains(v.hint, "no build of torch 2.11.0 for Linux aarch64 has kernels for sm_70")) << v.hint;
  EXPECT_TRUE(contains(v.hint, ddp::setting_value(ddp::Setting::kDevice, "cpu"))) << v.hint;
}

TEST(CudaSupport, ABuildWithKernelsThatThisDriverCannotRunAsksForANewerDriver) {
  const auto v = ddp::judge_cuda_support(gpu(70, "Tesla V100", {"sm_80"}, 11080, 11080, "1.x"));
  ASSERT_EQ(v.verdict, CudaSupport::kNoKernels);
  EXPECT_TRUE(contains(v.hint, "the cu126 build of torch 2.11.0 has kernels for sm_70 but this driver (CUDA 11.8)"))
      << v.hint;
  EXPECT_TRUE(contains(v.hint, "ask the site for a newer driver")) << v.hint;
}

}  // namespace
