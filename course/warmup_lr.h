// defines: WarmupLR — DeepSpeed's learning-rate warm-up (the Puhti example's scheduler): from
//          warmup_min_lr to warmup_max_lr over warmup_num_steps optimizer steps, on a log (default)
//          or linear curve, then constant. Plain C++: the rate of a step is a pure function.
#pragma once

#include <cstdint>

#include "course/deepspeed_config.h"

namespace ddpw {

class WarmupLR {
 public:
  explicit WarmupLR(const WarmupLRConfig& config);

  // The learning rate optimizer step `step` (0-based) uses, as under DeepSpeed's engine: the
  // scheduler starts before its first iteration (warmup_min_lr) and advances after every
  // optimizer step; with the log curve, log(1) = 0 makes the first two steps warmup_min_lr.
  double lr_at(int64_t step) const;

 private:
  WarmupLRConfig config_;
  int64_t num_steps_;   // DeepSpeed uses at least 2 (log(1) would divide by zero)
  double inverse_log_;  // 1 / log(num_steps_)
};

}  // namespace ddpw
