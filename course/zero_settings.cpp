#include "course/zero_settings.h"

#include <sstream>

#include "course/warmup_lr.h"

namespace ddpw {

AdamConfig adam_config(const Options& o) {
  AdamConfig c = o.deepspeed.optimizer.value_or(AdamConfig{});
  if (o.lr > 0) c.lr = o.lr;
  return c;
}

double learning_rate_at(const Options& o, int64_t step) {
  if (o.deepspeed.scheduler) return WarmupLR(*o.deepspeed.scheduler).lr_at(step);
  return adam_config(o).lr;
}

LossScaleConfig loss_scale_config(const Options& o) {
  if (o.deepspeed.precision == "fp16") return o.deepspeed.fp16;
  LossScaleConfig pytorch;
  pytorch.loss_scale_window = 2000;
  pytorch.hysteresis = 1;
  pytorch.min_loss_scale = 0;
  return pytorch;
}

std::string describe_precision(const Options& o) {
  if (o.precision == "bf16") return "bf16: autocast bfloat16; parameters, gradients, optimizer state float32";
  if (o.precision != "fp16") return o.precision;
  const LossScaleConfig l = loss_scale_config(o);
  std::ostringstream s;
  s << "fp16: autocast float16, loss scale ";
  if (l.loss_scale > 0) {
    s << l.loss_scale << " (static)";
  } else {
    s << "2^" << l.initial_scale_power << " (dynamic: x2 after " << l.loss_scale_window << " steps without inf/NaN, x0.5 ";
    if (l.hysteresis == 1)
      s << "at each overflow";
    else
      s << "at each overflow but the first " << l.hysteresis - 1 << " since it last grew (hysteresis " << l.hysteresis
        << ")";
    if (l.min_loss_scale > 0) s << ", at least " << l.min_loss_scale;
    s << ")";
  }
  return s.str();
}

std::string describe_adam(const Options& o) {
  const AdamConfig c = adam_config(o);
  std::ostringstream s;
  s << (c.decoupled_weight_decay ? "AdamW" : "Adam") << " lr " << c.lr << ", betas (" << c.beta1 << ", " << c.beta2
    << "), eps " << c.eps << ", weight decay " << c.weight_decay;
  return s.str();
}

std::string describe_schedule(const Options& o) {
  if (!o.deepspeed.scheduler) return "(none: constant rate)";
  const WarmupLRConfig& w = *o.deepspeed.scheduler;
  std::ostringstream s;
  s << "WarmupLR (" << w.warmup_type << ") " << w.warmup_min_lr << " -> " << w.warmup_max_lr << " over "
    << w.warmup_num_steps << " steps";
  return s.str();
}

}  // namespace ddpw
