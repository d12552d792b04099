// defines: judge_cuda_support — can this LibTorch run on this GPU with this driver? A build of
//          LibTorch carries kernels for a list of GPU architectures (sm_75 ... sm_120: binary
//          kernels, compute_XX: PTX the driver compiles for newer GPUs) and needs a driver that
//          supports its CUDA version. When either fails, every program would stop at its first
//          kernel ("no kernel image is available") or see no GPU at all; the verdict says so at
//          start-up, naming the build of torch to install. parse_arch_flags reads the arch list
//          as LibTorch reports it; suggest_torch_build picks a build from torch 2.11's Linux
//          builds (cu126, cu128, cu130). Plain C++ (no LibTorch).
#pragma once

#include <string>
#include <vector>

namespace ddp {

struct CudaSupportInput {
  int capability = 0;                  // compute capability as 10 * major + minor (V100: 70); 0: no GPU seen
  std::string gpu_name;                // "Tesla V100-SXM2-32GB"
  std::vector<std::string> arch_list;  // LibTorch's, e.g. {"sm_75", "sm_80", "compute_120"}; empty: unknown
  int driver_cuda = 0;                 // the newest CUDA the driver supports (cudaDriverGetVersion: 12040); 0: unknown
  int torch_cuda = 0;                  // the CUDA LibTorch was built with (13000 = 13.0); 0: unknown
  std::string torch_version;           // "2.11.0+cu130"
  std::string machine = "x86_64";      // uname's machine: aarch64 builds carry other archs
};

enum class CudaSupport {
  kOk,            // kernels for this GPU, and a driver new enough
  kNoKernels,     // no kernel image for this GPU's architecture in this LibTorch
  kDriverTooOld,  // the driver supports an older CUDA major than LibTorch's (or PTX from a newer CUDA)
  kUnknown,       // not enough known to tell (no GPU seen and no driver version, or no arch list)
};

// The torch release whose Linux builds the advice names (its support matrix is in cuda_support.cpp);
// in the supported window, whichever LibTorch the program runs.
inline constexpr const char* kAdvisedTorchRelease = "2.11.0";

struct CudaSupportVerdict {
  CudaSupport verdict = CudaSupport::kUnknown;
  std::string summary;     // one line for a report: the GPU's arch, the kernels that serve it, the driver
  std::string what, hint;  // the error and its fix, when kNoKernels or kDriverTooOld
  std::string build;       // the torch build the hint names ("cu126", "cu128", "cu130"), or "" if none
};

// The arch list from either form LibTorch reports: nvcc's gencode flags
// ("-gencode;arch=compute_70,code=sm_70;...;arch=compute_90,code=compute_90") or a list separated
// by spaces ("sm_75 sm_80 compute_120", as torch.cuda.get_arch_list() gives it). Duplicates dropped,
// first order kept.
std::vector<std::string> parse_arch_flags(const std::string& text);

// 12040 -> "12.4", 13000 -> "13.0" (cudaDriverGetVersion's and CUDART_VERSION's form).
std::string cuda_version_text(int version);

// 70 -> "sm_70", 120 -> "sm_120".
std::string sm_name(int capability);

// The newest of torch 2.11's Linux builds for `machine` (x86_64 or aarch64) with kernels for this
// GPU that this driver runs (driver_cuda 0: any driver): "cu130", "cu128", "cu126", or "" if none.
std::string suggest_torch_build(int capability, int driver_cuda, const std::string& machine);

CudaSupportVerdict judge_cuda_support(const CudaSupportInput& input);

}  // namespace ddp
