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
