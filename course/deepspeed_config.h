// defines: DeepSpeedConfig, load_deepspeed_config — the keys of DeepSpeed's ds_config.json that the
//          course's ZeRO training applies, read with nlohmann::json so that a Puhti user's file works
//          unchanged:
//            train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
//            optimizer {type Adam|AdamW, params {lr, betas, eps, weight_decay, adam_w_mode}}
//            scheduler {type WarmupLR, params {warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type}}
//            gradient_clipping, steps_per_print, zero_optimization {stage 0|1|2, reduce_bucket_size}
//            bf16 {enabled}, fp16 {enabled, loss_scale, initial_scale_power, loss_scale_window,
//                                  hysteresis, min_loss_scale}: mixed precision (--precision)
//          Every other key is listed in `ignored` (DeepSpeed's own keys as "not applied here", others
//          as unknown, with the nearest known key: a typo does not pass silently). A bad value, a
//          duplicate key or a feature we do not have (ZeRO-3, another optimizer) is a ddp::Error that
//          names the key and the fix. Plain C++: no LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddpw {

// DeepSpeed's "Adam" is AdamW (decoupled weight decay) unless "adam_w_mode": false, as in
// DeepSpeed's engine; "AdamW" always is.
struct AdamConfig {
  std::string type = "AdamW";  // as written in the file
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // DeepSpeed's default (torch.optim.AdamW's is 0.01)
  bool decoupled_weight_decay = true;
};

struct WarmupLRConfig {
  double warmup_min_lr = 0;
  double warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log | linear
};

// The three batch numbers DeepSpeed derives from the file and the world size.
struct BatchSizes {
  int64_t train_batch_size = 0;             // samples per optimizer step, all ranks together
  int64_t micro_batch_per_gpu = 0;          // samples per forward/backward on one rank
  int64_t gradient_accumulation_steps = 1;  // micro-batches per optimizer step
};

// fp16's loss scaler, DeepSpeed's keys and defaults. The course maps it onto ddp::GradScaler
// (from_options.h), which differs from DeepSpeed's DynamicLossScaler as docs/mixed-precision.md says.
struct LossScaleConfig {
  double loss_scale = 0;              // 0: dynamic; > 0: this fixed scale
  int64_t initial_scale_power = 16;   // dynamic: the first scale is 2^power
  int64_t loss_scale_window = 1000;   // steps in a row without overflow before the scale doubles
  int64_t hysteresis = 2;             // the overflow (since the scale last grew) that halves the scale
  double min_loss_scale = 1;          // the scale never goes below it
};

struct DeepSpeedConfig {
  std::string origin;  // the file, for messages
  std::optional<int64_t> train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;
  std::optional<AdamConfig> optimizer;        // absent: the program's own optimizer settings
  std::optional<WarmupLRConfig> scheduler;    // absent: a constant learning rate
  double gradient_clipping = 0;               // max global gradient norm; 0: off
  int64_t steps_per_print = 10;               // DeepSpeed's default
  int zero_stage = 0;                         // 0: plain data parallelism
  std::optional<int64_t> reduce_bucket_size;  // elements per gradient bucket
  std::string precision;                      // "bf16" or "fp16" when that section is enabled; "" otherwise
  LossScaleConfig fp16;                       // fp16's loss scaler (used when precision is "fp16")
  std::vector<std::string> ignored;           // "key: why", in file order

  // DeepSpeed's rules: any two of the three numbers give the third; one alone means no
  // accumulation. Throws ddp::Error naming the keys when they do not fit this world size.
  BatchSizes batch_sizes(int world_size) const;
};

// `origin` names the text in messages (usually the file name).
DeepSpeedConfig parse_deepspeed_config(const std::string& json_text, const std::string& origin);
// Reads and parses a file; a missing or unreadable file is an error naming it.
DeepSpeedConfig load_deepspeed_config(const std::string& path);

}  // namespace ddpw
