#include "ddp/autocast.h"

#include <ATen/autocast_mode.h>  // defines: at::autocast (the flags, the nesting level, the cast cache)

#include "ddp/error.h"

namespace ddp {

Autocast::Autocast(const AutocastOptions& o) : device_type_(o.device_type) {
  DDP_CHECK(at::autocast::is_autocast_available(o.device_type),
            "LibTorch has no autocast for device type " + c10::DeviceTypeName(o.device_type),
            "use autocast on the CPU or on CUDA devices");
  DDP_CHECK(o.dtype == torch::kBFloat16 || o.dtype == torch::kHalf,
            std::string("autocast to ") + c10::toString(o.dtype) + " is not offered by LibTorch",
            "use torch::kBFloat16 or torch::kHalf");
  // The order of torch.autocast.__enter__.
  previous_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  previous_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, o.enabled);
  at::autocast::set_autocast_dtype(device_type_, o.dtype);
  at::autocast::increment_nesting();
  at::autocast::set_autocast_cache_enabled(o.cache_enabled);
}

Autocast::~Autocast() {
  // torch.autocast.__exit__: the cache goes when the outermost autocast ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
  at::autocast::set_autocast_cache_enabled(previous_cache_enabled_);
}

torch::ScalarType autocast_dtype(const std::string& precision) {
  if (precision == "bf16") return torch::kBFloat16;
  if (precision == "fp16") return torch::kHalf;
  throw Error("precision '" + precision + "' has no autocast dtype", "use bf16 or fp16 (fp32 needs no autocast)");
}

}  // namespace ddp
