// defines: what ZeRO training takes from the command line and DeepSpeed's ds_config.json at every
//          step, for the programs that train with ZeRO (step 4, the trainer's zero1/zero2): Adam's
//          settings (adam_config) and the learning rate of each optimizer step (learning_rate_at:
//          DeepSpeed's WarmupLR, or Adam's constant rate without a scheduler); and, for every program,
//          fp16's loss scaler (loss_scale_config: ds_config.json's fp16 section, else PyTorch's
//          GradScaler). The batch size, steps_per_print, the stage and the precision are applied
//          once, by parse_options. Plain C++: no LibTorch.
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

// --precision fp16's loss scaler: the config's fp16 section when the config enabled fp16; else
// PyTorch's GradScaler in DeepSpeed's terms (2^16, dynamic, window 2000, hysteresis 1, no floor).
LossScaleConfig loss_scale_config(const Options& options);

// The settings table's "precision" row, e.g. "fp16: autocast float16, loss scale 2^16 (dynamic: x2
// after 2000 steps without inf/NaN, x0.5 at each overflow)".
std::string describe_precision(const Options& options);

// "AdamW lr 0.001, betas (0.8, 0.999), eps 1e-08, weight decay 3e-07" and "WarmupLR (log) 0 -> 0.001
// over 1000 steps": the settings table's rows.
std::string describe_adam(const Options& options);
std::string describe_schedule(const Options& options);

}  // namespace ddpw
