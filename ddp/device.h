// defines: choose_device — the device a rank trains on. CUDA when available (local rank -> GPU,
//          bound before any NCCL work), else CPU; gpu_bus_id, the PCI address that names a GPU
//          whatever CUDA_VISIBLE_DEVICES calls it (whether ranks may share a GPU is decided from
//          it, over the store: gpu_sharing.h); workers_per_node, the workers for spawn().
#pragma once

#include <torch/torch.h>

#include <string>

namespace ddp {

// `requested`: auto | cpu | cuda | cuda:N. With cuda/auto the GPU is the local rank; with more
// local ranks than visible GPUs they take the GPUs in turn (one GPU per task, as with
// --gpus-per-task=1, is GPU 0 for each). cuda:N puts every rank of the node on GPU N. Ranks that
// end up sharing a GPU are refused later, by the process group, and only for NCCL (Gloo works).
// Sets this thread's current CUDA device. Sharing is judged from the ranks' PCI bus ids, not from
// counts, so tasks whose CUDA_VISIBLE_DEVICES name the same GPU are caught too.
torch::Device choose_device(const std::string& requested, int local_rank);

// "0000:3b:00.0" for a CUDA device (from torch's own CUDA runtime), "" for the CPU.
std::string gpu_bus_id(const torch::Device& device);

// Workers to spawn on this node: one per visible GPU, or `nproc` on the CPU (no GPU visible, or
// `requested_device` "cpu"). When GPUs decide, says so in one line on stdout, since `nproc` is then unused.
int workers_per_node(const std::string& requested_device, int nproc);

// Number of GPUs this process can see (0 without CUDA).
int visible_gpus();

std::string device_name(const torch::Device& device);  // "cpu" or "cuda:0 (NVIDIA H100 ...)"

}  // namespace ddp
