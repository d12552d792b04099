// defines: PeakMemory, peak_memory and describe — the most memory this rank has held so far, which
//          every rank prints at the end of training (EpochReporter::end_training: "peak memory: ..."),
//          so that the largest batch per device can be found from a short run (--steps):
//            * on a GPU, the bytes its tensors took at their peak (the caching allocator's peak of
//              allocated bytes: Python's torch.cuda.max_memory_allocated), and what the allocator
//              reserved at its peak (torch.cuda.max_memory_reserved: what nvidia-smi sees, roughly);
//            * on the CPU, the process's peak resident set (getrusage's ru_maxrss, Linux's VmHWM),
//              LibTorch's libraries and the data set included.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace ddpw {

struct PeakMemory {
  bool gpu = false;
  int64_t bytes = 0;     // GPU: allocated at the peak; CPU: resident at the peak
  int64_t reserved = 0;  // GPU: the allocator's reserve at its peak; CPU: 0
};

// Since the process started, for `device` (a CUDA device: its allocator's statistics; else the process).
PeakMemory peak_memory(const torch::Device& device);

// "412.30 MB resident (the process's peak: ...)" or "3210.45 MB allocated on cuda:0 (...)".
std::string describe(const PeakMemory& peak, const torch::Device& device);

}  // namespace ddpw
