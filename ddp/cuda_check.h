// defines: check_cuda_support — judge_cuda_support (cuda_support.h) for this process: the GPU's
//          compute capability, LibTorch's arch list and CUDA version (from its CUDA hooks) and the
//          driver's CUDA version (cudaDriverGetVersion). choose_device calls it on --device cuda, so
//          a LibTorch without kernels for the GPU, or a driver too old for it, stops the program at
//          start-up with the build to install, not at its first kernel.
#pragma once

#include "ddp/cuda_support.h"

namespace ddp {

// What is known here about GPU `device_index` (< 0: none is visible) and this LibTorch. Without
// CUDA in LibTorch: an input that judges kUnknown.
CudaSupportInput cuda_support_input(int device_index);

// The verdict for GPU `device_index` (< 0: none visible); throws ddp::Error(what, hint) when it
// is kNoKernels or kDriverTooOld.
CudaSupportVerdict check_cuda_support(int device_index);

}  // namespace ddp
