// defines: what ZeRO training takes from the command line and DeepSpeed's ds_config.json at every
//          step, for the programs that train with ZeRO (step 4, the trainer's zero1/zero2): Adam's
//          settings (adam_config) and the learning rate of each optimizer step (learning_rate_at:
//          DeepSpeed's WarmupLR, or Adam's constant rate without a scheduler). The batch size,
//          steps_per_print and the stage are applied once, by parse_options. Plain C++: no LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "course/deepspeed_config.h"
#include "course/options.h"

namespace ddpw {

// The config's optimizer section; without one AdamW with DeepSpeed's defaults (lr 1e-3, betas 0.9 and
// 0.999, eps 1e-8, no weight decay). --lr, when given, replaces its learning rate.
AdamConfig adam_config(const Options& options);

// The learning rate optimizer step `step` (0-based: the steps taken before it) uses: the config's
// WarmupLR (course/warmup_lr.h), or adam_config's constant rate without a scheduler.
double learning_rate_at(const Options& options, int64_t step);

// "AdamW lr 0.001, betas (0.8, 0.999), eps 1e-08, weight decay 3e-07" and "WarmupLR (log) 0 -> 0.001
// over 1000 steps": the settings table's rows.
std::string describe_adam(const Options& options);
std::string describe_schedule(const Options& options);

}  // namespace ddpw
