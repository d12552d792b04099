#include "ddp/device.h"
#include "ddp/config.h"  // defines: DDPW_HAVE_CUDA

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddp/detail/cuda_check.h"  // defines: check_cuda_support
#include "ddp/error.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

#ifdef DDPW_HAVE_CUDA
#include <ATen/cuda/CUDAContextLight.h>  // at::cuda::getDeviceProperties: torch's CUDA runtime, not ours
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ddp {

int visible_gpus() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

torch::Device choose_device(const std::string& requested, int local_rank) {
  if (requested == "cpu" || (requested == "auto" && visible_gpus() == 0)) return torch::Device(torch::kCPU);

#ifdef DDPW_CPU_ONLY_BECAUSE
  DDP_CHECK(false,
            setting_value(Setting::kDevice, requested) +
                " asks for a GPU, but this build of the library is CPU-only: "
                "it was configured with DDPW_OTHER_CUDA_TOOLKIT, " DDPW_CPU_ONLY_BECAUSE,
            "use " + setting_value(Setting::kDevice, "cpu") +
                ", or configure a fresh build folder with the CUDA toolkit of LibTorch's CUDA major version");
#endif
  const int gpus = visible_gpus();
  if (gpus == 0) check_cuda_support(-1);  // a driver too old for LibTorch's CUDA hides every GPU: say so
  DDP_CHECK(gpus > 0,
            setting_value(Setting::kDevice, requested) + " asks for a GPU but none is visible to this process",
            "use " + setting_value(Setting::kDevice, "cpu") +
                ", or request GPUs from the scheduler (--gres=gpu:N / --gpus-per-node=N)");
  // More ranks than GPUs share them in turn: valid for Gloo; for NCCL the process group refuses it,
  // naming the GPU by its bus id, once it knows every rank's (one GPU per task is GPU 0 for each).
  int index = local_rank % gpus;
  if (requested.rfind("cuda:", 0) == 0) index = std::stoi(requested.substr(5));
  DDP_CHECK(index < gpus,
            "device cuda:" + std::to_string(index) + " does not exist (" + std::to_string(gpus) + " visible)",
            "pick an index below the visible GPU count, or check CUDA_VISIBLE_DEVICES");
#ifdef DDPW_HAVE_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));  // before any NCCL work
#endif
  check_cuda_support(index);  // kernels for this GPU in this LibTorch, before its first kernel fails
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string gpu_bus_id([[maybe_unused]] const torch::Device& device) {
  if (!device.is_cuda()) return "";
#ifdef DDPW_HAVE_CUDA
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  char id[32];
  std::snprintf(id, sizeof id, "%04x:%02x:%02x.0", static_cast<unsigned>(prop->pciDomainID),
                static_cast<unsigned>(prop->pciBusID), static_cast<unsigned>(prop->pciDeviceID));
  return id;
#else
  return "?";
#endif
}

int workers_per_node(const std::string& requested_device, int nproc) {
  const int gpus = requested_device == "cpu" ? 0 : visible_gpus();
  if (gpus == 0) return nproc;
  std::printf("%d GPU(s) visible: starting one worker per GPU (%d); %s (%d) counts CPU workers, for %s\n", gpus, gpus,
              setting_name(Setting::kWorkers).c_str(), nproc, setting_value(Setting::kDevice, "cpu").c_str());
  std::fflush(stdout);
  return gpus;
}

std::string device_name(const torch::Device& device) {
  if (!device.is_cuda()) return "cpu";
  std::string name = "cuda:" + std::to_string(device.index());
#ifdef DDPW_HAVE_CUDA
  name += std::string(" (") + at::cuda::getDeviceProperties(device.index())->name + ")";
#endif
  return name;
}

}  // namespace ddp
