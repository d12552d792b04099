// defines: check_cuda_support — judge_cuda_support (cuda_support.h) for this process: the GPU's
//          compute capability, LibTorch's arch list and CUDA version (from its CUDA hooks) and the
//          driver's CUDA version (cudaDriverGetVersion). choose_device calls it for a "cuda" device, so
//          a LibTorch without kernels for the GPU, or a driver too old for it, stops the program at
//          start-up with the build to install, not at its first kernel.
#pragma once

#include <string>
#include <utility>

#include "ddp/detail/cuda_support.h"  // defines: CudaSupportInput, CudaSupportVerdict, judge_cuda_support
#include "ddp/error.h"                // defines: ddp::Error

namespace ddp {

// What check_cuda_support throws: a ddp::Error whose hint names the torch build to install, and
// that build alone (build(): "cu126", "cu128", "cu130", or "" if none fits), so that a program can
// say how its own set-up installs it.
class UnsupportedCudaError : public Error {
 public:
  UnsupportedCudaError(const std::string& what, const std::string& hint, std::string build)
      : Error(what, hint), build_(std::move(build)) {}
  const std::string& build() const { return build_; }

 private:
  std::string build_;
};

// What is known here about GPU `device_index` (< 0: none is visible) and this LibTorch. Without
// CUDA in LibTorch: an input that judges kUnknown.
CudaSupportInput cuda_support_input(int device_index);

// The verdict for GPU `device_index` (< 0: none visible); throws UnsupportedCudaError when it is
// kNoKernels or kDriverTooOld.
CudaSupportVerdict check_cuda_support(int device_index);

}  // namespace ddp
