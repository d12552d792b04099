#include "course/peak_memory.h"

#include <sys/resource.h>  // defines: getrusage (ru_maxrss)

#include <fmt/format.h>

#include "course/kept_memory.h"  // defines: format_bytes
#include "ddp/config.h"          // defines: DDPW_HAVE_CUDA

#ifdef DDPW_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>  // defines: getDeviceStats
#include <c10/cuda/CUDAFunctions.h>         // defines: current_device
#endif

namespace ddpw {

PeakMemory peak_memory(const torch::Device& device) {
  PeakMemory peak;
#ifdef DDPW_HAVE_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        device.has_index() ? device.index() : c10::cuda::current_device());
    constexpr size_t kAll = 0;  // StatType::AGGREGATE: the small and the large pool together
    peak.gpu = true;
    peak.bytes = stats.allocated_bytes[kAll].peak;
    peak.reserved = stats.reserved_bytes[kAll].peak;
    return peak;
  }
#endif
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) peak.bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux: kB
  return peak;
}

std::string describe(const PeakMemory& peak, const torch::Device& device) {
  if (peak.gpu)
    return fmt::format("{} allocated on {} (its tensors at their peak; the caching allocator reserved {})",
                       format_bytes(peak.bytes), device.str(), format_bytes(peak.reserved));
  return fmt::format("{} resident (the process's peak: LibTorch, the data and the training together)",
                     format_bytes(peak.bytes));
}

}  // namespace ddpw
