#include "course/compute.h"

#include <stdlib.h>
#include <torch/torch.h>

#include "ddp/device.h"
#include "ddp/threads.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on

int configure_compute(const Options& options, const LaunchEnv& launch) {
  const int threads = choose_threads(options.threads, launch.local_world_size);
  torch::set_num_threads(threads);
  if (options.deterministic) {
    // cuBLAS picks its workspace when a handle is created: set before the first matrix product.
    // A value the user chose stays (":16:8" is deterministic too; another one makes the first
    // cuBLAS call under deterministic algorithms fail with LibTorch's own message).
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  return threads;
}

}  // namespace ddpw
