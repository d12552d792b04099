#include "course/warmup_lr.h"

#include <algorithm>
#include <cmath>

namespace ddpw {

WarmupLR::WarmupLR(const WarmupLRConfig& config)
    : config_(config),
      num_steps_(std::max<int64_t>(2, config.warmup_num_steps)),
      inverse_log_(1.0 / std::log(static_cast<double>(num_steps_))) {}

double WarmupLR::lr_at(int64_t step) const {
  const int64_t iteration = step - 1;  // the scheduler's count when this step runs
  if (iteration < 0) return config_.warmup_min_lr;
  double gamma = 1.0;
  if (iteration < num_steps_) {
    gamma = config_.warmup_type == "linear"
                ? static_cast<double>(iteration) / static_cast<double>(num_steps_)
                : inverse_log_ * std::log(static_cast<double>(iteration + 1));  // DeepSpeed's order
  }
  return config_.warmup_min_lr + (config_.warmup_max_lr - config_.warmup_min_lr) * gamma;
}

}  // namespace ddpw
