// defines: choose_device — the device a rank trains on. CUDA when available (local rank -> GPU,
//          bound before any NCCL work), else CPU; checks that the node does not run more ranks
//          than it has visible GPUs ("Duplicate GPU detected" otherwise).
#pragma once

#include <torch/torch.h>

#include <string>

#include "ddp/threads.h"  // choose_threads lives there now; kept visible to includers of device.h

namespace ddp {

// `requested`: auto | cpu | cuda | cuda:N. With cuda/auto and several local ranks, the GPU is the
// local rank. Sets this thread's current CUDA device.
torch::Device choose_device(const std::string& requested, int local_rank, int local_world_size);

// Number of GPUs this process can see (0 without CUDA).
int visible_gpus();

std::string device_name(const torch::Device& device);  // "cpu" or "cuda:0 (NVIDIA H100 ...)"

}  // namespace ddp
