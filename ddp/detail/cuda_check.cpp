#include "ddp/detail/cuda_check.h"

#include <sys/utsname.h>

#include <exception>
#include <string>

#include "ddp/config.h"  // defines: DDPW_HAVE_CUDA
#include "ddp/error.h"   // defines: ddp::Error

#ifdef DDPW_HAVE_CUDA
#include <ATen/cuda/CUDAContextLight.h>      // at::cuda::getDeviceProperties
#include <ATen/detail/CUDAHooksInterface.h>  // at::detail::getCUDAHooks: LibTorch's CUDA build settings
#include <cuda_runtime_api.h>                // cudaDriverGetVersion
#endif

namespace ddp {
namespace {

std::string machine() {
  struct utsname name {};
  return ::uname(&name) == 0 ? name.machine : "x86_64";
}

#ifdef DDPW_HAVE_CUDA
// LibTorch's build settings name the archs it was compiled for, in nvcc's gencode flags, on a line
// "  - NVCC architecture flags: -gencode;arch=compute_75,code=sm_75;..." (torch.__config__.show()).
// They need a working driver; without one the list stays unknown.
std::vector<std::string> torch_arch_list() {
  std::string config;
  try {
    config = at::detail::getCUDAHooks().showConfig();
  } catch (const std::exception&) {
    return {};
  }
  const std::string key = "NVCC architecture flags:";
  const auto at = config.find(key);
  if (at == std::string::npos) return {};
  const auto end = config.find('\n', at);
  return parse_arch_flags(config.substr(at + key.size(), end == std::string::npos ? end : end - at - key.size()));
}
#endif

}  // namespace

CudaSupportInput cuda_support_input([[maybe_unused]] int device_index) {
  CudaSupportInput in;
  in.machine = machine();
#ifdef DDPW_TORCH_VERSION
  in.torch_version = DDPW_TORCH_VERSION;
#endif
#ifdef DDPW_HAVE_CUDA
  try {
    in.torch_cuda = static_cast<int>(at::detail::getCUDAHooks().versionCUDART());
  } catch (const std::exception&) {
    in.torch_cuda = 0;
  }
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) in.driver_cuda = driver;  // 0 without a driver
  if (device_index >= 0) {
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device_index));
    in.capability = prop->major * 10 + prop->minor;
    in.gpu_name = prop->name;
    in.arch_list = torch_arch_list();
  }
  // "2.11.0+cu130", as the wheels name their CUDA build
  if (in.torch_cuda > 0 && in.torch_version.find('+') == std::string::npos)
    in.torch_version += "+cu" + std::to_string(in.torch_cuda / 1000) + std::to_string(in.torch_cuda % 1000 / 10);
#endif
  return in;
}

CudaSupportVerdict check_cuda_support(int device_index) {
  CudaSupportVerdict verdict = judge_cuda_support(cuda_support_input(device_index));
  if (verdict.verdict == CudaSupport::kNoKernels || verdict.verdict == CudaSupport::kDriverTooOld)
    throw UnsupportedCudaError(verdict.what, verdict.hint, verdict.build);
  return verdict;
}

}  // namespace ddp
