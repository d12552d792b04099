#include "ddp/device.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "ddp/error.h"

#ifdef DDPW_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace ddp {

int visible_gpus() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

torch::Device choose_device(const std::string& requested, int local_rank, int local_world_size) {
  if (requested == "cpu" || (requested == "auto" && visible_gpus() == 0)) return torch::Device(torch::kCPU);

  const int gpus = visible_gpus();
  DDP_CHECK(gpus > 0, "--device " + requested + " asks for a GPU but none is visible to this process",
            "use --device cpu, or request GPUs from the scheduler (--gres=gpu:N / --gpus-per-node=N)");
  int index = local_rank;
  if (requested.rfind("cuda:", 0) == 0) {
    index = std::stoi(requested.substr(5));
  } else if (local_world_size > gpus) {
    // With --gpus-per-task=1 the scheduler shows each task one GPU: it is device 0 for every task.
    // Otherwise ranks would share a GPU, NCCL's "Duplicate GPU detected": say so before any collective.
    DDP_CHECK(gpus == 1 && std::getenv("CUDA_VISIBLE_DEVICES"),
              std::to_string(local_world_size) + " ranks on this node but only " + std::to_string(gpus) +
                  " GPU(s) visible: ranks would share a GPU",
              "make --ntasks-per-node equal the GPUs per node (--gres=gpu:N / --gpus-per-node=N)");
    index = 0;
  }
  DDP_CHECK(index < gpus, "device cuda:" + std::to_string(index) + " does not exist (" + std::to_string(gpus) + " visible)",
            "pick an index below the visible GPU count, or check CUDA_VISIBLE_DEVICES");
#ifdef DDPW_HAVE_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));  // before any NCCL work
#endif
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string device_name(const torch::Device& device) {
  if (!device.is_cuda()) return "cpu";
  std::string name = "cuda:" + std::to_string(device.index());
#ifdef DDPW_HAVE_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) name += std::string(" (") + prop.name + ")";
#endif
  return name;
}

}  // namespace ddp
