// DeepSpeed's ds_config.json (course/deepspeed_config.h) and its WarmupLR (course/warmup_lr.h): the Puhti
// example's file reads as DeepSpeed reads it, batch sizes follow DeepSpeed's derivations, keys that
// are not applied are listed (a typo with its nearest key), and bad values are errors that name
// the key and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "course/deepspeed_config.h"
#include "course/warmup_lr.h"
#include "ddp/error.h"

namespace {

// The Puhti seed's ds_config.json (CSCfi/pytorch-ddp-examples, as of the seed commit), verbatim.
const char* const kPuhtiConfig = R"({
  "train_batch_size": 400,
  "steps_per_print": 2000,
  "optimizer": {
    "type": "Adam",
    "params": {
      "lr": 0.001,
      "betas": [
        0.8,
        0.999
      ],
      "eps": 1e-8,
      "weight_decay": 3e-7
    }
  },
  "scheduler": {
    "type": "WarmupLR",
    "params": {
      "warmup_min_lr": 0,
      "warmup_max_lr": 0.001,
      "warmup_num_steps": 1000
    }
  },
  "gradient_clipping": 1.0,
  "prescale_gradients": false,
  "wall_clock_breakdown": false
}
)";

ddpw::DeepSpeedConfig parse(const std::string& text) { return ddpw::parse_deepspeed_config(text, "ds_config.json"); }

// The error's message and hint, for matching.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ddp::Error& e) {
    return e.message() + " | fix: " + e.hint();
  }
  return "no error";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool listed(const ddpw::DeepSpeedConfig& c, const std::string& part) {
  for (const auto& line : c.ignored)
    if (has(line, part)) return true;
  return false;
}

TEST(DeepSpeedConfig, ReadsThePuhtiExample) {
  const auto c = parse(kPuhtiConfig);
  EXPECT_EQ(c.train_batch_size, 400);
  EXPECT_FALSE(c.train_micro_batch_size_per_gpu);
  EXPECT_FALSE(c.gradient_accumulation_steps);
  EXPECT_EQ(c.steps_per_print, 2000);
  ASSERT_TRUE(c.optimizer);
  EXPECT_EQ(c.optimizer->type, "Adam");
  EXPECT_TRUE(c.optimizer->decoupled_weight_decay) << "DeepSpeed's \"Adam\" is AdamW unless adam_w_mode is false";
  EXPECT_DOUBLE_EQ(c.optimizer->lr, 0.001);
  EXPECT_DOUBLE_EQ(c.optimizer->beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer->beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer->eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer->weight_decay, 3e-7);
  ASSERT_TRUE(c.scheduler);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_min_lr, 0);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_max_lr, 0.001);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler->warmup_type, "log");
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.zero_stage, 0);
  ASSERT_EQ(c.ignored.size(), 2u);
  EXPECT_TRUE(has(c.ignored[0], "prescale_gradients: not applied here")) << c.ignored[0];
  EXPECT_TRUE(has(c.ignored[1], "wall_clock_breakdown: not applied here")) << c.ignored[1];
}

// On Puhti's 4 GPUs the global batch 400 is the seed's 100 per GPU.
TEST(DeepSpeedConfig, PuhtiBatchSizesFollowTheWorldSize) {
  const auto c = parse(kPuhtiConfig);
  const auto four = c.batch_sizes(4);
  EXPECT_EQ(four.train_batch_size, 400);
  EXPECT_EQ(four.micro_batch_per_gpu, 100);
  EXPECT_EQ(four.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.batch_sizes(2).micro_batch_per_gpu, 200);
  EXPECT_EQ(c.batch_sizes(8).micro_batch_per_gpu, 50);
  const auto three = error_of([&] { c.batch_sizes(3); });
  EXPECT_TRUE(has(three, "train_batch_size 400 is not")) << three;
  EXPECT_TRUE(has(three, "133 x 1 x 3 = 399")) << three;
  EXPECT_TRUE(has(three, "multiple of 3")) << three;
  EXPECT_TRUE(has(three, "train_micro_batch_size_per_gpu instead")) << three;
}

TEST(DeepSpeedConfig, BatchSizeDerivationsAsDeepSpeed) {
  auto sizes = [](const std::string& json, int world) { return parse(json).batch_sizes(world); };
  auto b = sizes(R"({"train_micro_batch_size_per_gpu": 32})", 3);
  EXPECT_EQ(b.train_batch_size, 96);
  EXPECT_EQ(b.gradient_accumulation_steps, 1);
  b = sizes(R"({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4})", 2);
  EXPECT_EQ(b.train_batch_size, 64);
  b = sizes(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8})", 2);
  EXPECT_EQ(b.gradient_accumulation_steps, 4);
  b = sizes(R"({"train_batch_size": 64, "gradient_accumulation_steps": 4})", 2);
  EXPECT_EQ(b.micro_batch_per_gpu, 8);
  b = sizes(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4})", 2);
  EXPECT_EQ(b.micro_batch_per_gpu, 8);
  const auto inconsistent = error_of([&] {
    sizes(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2})", 2);
  });
  EXPECT_TRUE(has(inconsistent, "8 x 2 x 2 = 32")) << inconsistent;
  const auto neither = error_of([&] { sizes(R"({"gradient_accumulation_steps": 2})", 2); });
  EXPECT_TRUE(has(neither, "neither train_batch_size nor train_micro_batch_size_per_gpu")) << neither;
  const auto too_small = error_of([&] { sizes(R"({"train_batch_size": 2})", 3); });
  EXPECT_TRUE(has(too_small, "0 x 1 x 3 = 0")) << too_small;
}

TEST(DeepSpeedConfig, AdamWModeAsDeepSpeedsEngine) {
  EXPECT_FALSE(
      parse(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})").optimizer->decoupled_weight_decay);
  EXPECT_TRUE(
      parse(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})").optimizer->decoupled_weight_decay);
  EXPECT_TRUE(parse(R"({"optimizer": {"type": "adamw"}})").optimizer->decoupled_weight_decay);  // DeepSpeed lowercases
  const auto c = parse(R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})");
  EXPECT_TRUE(listed(c, "optimizer.params.torch_adam"));
  EXPECT_DOUBLE_EQ(c.optimizer->lr, 1e-3);  // DeepSpeed's defaults
  EXPECT_DOUBLE_EQ(c.optimizer->weight_decay, 0);
}

TEST(DeepSpeedConfig, ZeroStageAndBucketSize) {
  auto c = parse(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "overlap_comm": true,
                     "contiguous_gradients": true, "stage3_max_live_parameters": 1e9}})");
  EXPECT_EQ(c.zero_stage, 2);
  EXPECT_EQ(c.reduce_bucket_size, 500000000);
  EXPECT_TRUE(listed(c, "zero_optimization.overlap_comm: not applied here (always on"));
  EXPECT_TRUE(listed(c, "zero_optimization.contiguous_gradients"));
  EXPECT_TRUE(listed(c, "zero_optimization.stage3_max_live_parameters"));
  EXPECT_EQ(parse(R"({"zero_optimization": true})").zero_stage, 1);  // DeepSpeed's old form
  const auto three = error_of([] { parse(R"({"zero_optimization": {"stage": 3}})"); });
  EXPECT_TRUE(has(three, "zero_optimization.stage is 3")) << three;
  EXPECT_TRUE(has(three, "use stage 1")) << three;
}

TEST(DeepSpeedConfig, UnknownKeysAreListedWithTheNearestKnownOne) {
  const auto c = parse(R"({"train_batch_size": 8, "gradient_cliping": 1.0, "my_own_setting": 3,
                           "optimizer": {"type": "AdamW", "params": {"weight_decya": 0.1}},
                           "zero_optimization": {"stgae": 2}})");
  EXPECT_TRUE(listed(c, "gradient_cliping: unknown key, ignored (did you mean \"gradient_clipping\"?)"));
  EXPECT_TRUE(listed(c, "my_own_setting: unknown key, ignored"));
  EXPECT_FALSE(listed(c, "my_own_setting: unknown key, ignored (did you mean"));
  EXPECT_TRUE(listed(c, "optimizer.params.weight_decya: unknown key, ignored (did you mean \"weight_decay\"?)"));
  EXPECT_TRUE(listed(c, "zero_optimization.stgae: unknown key, ignored (did you mean \"stage\"?)"));
  EXPECT_EQ(c.zero_stage, 0);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0);
}

TEST(DeepSpeedConfig, BadValuesNameTheKeyAndTheFix) {
  struct Case {
    const char* json;
    const char* expected;
  };
  const Case cases[] = {
      {R"({"optimizer": {"type": "Adam", "params": {"lr": "0.001"}}})",
       "optimizer.params.lr must be a number, not the string \"0.001\" | fix: write it without quotes"},
      {R"({"train_batch_size": "auto"})",
       "train_batch_size is \"auto\" | fix: \"auto\" is filled in by the Hugging Face Trainer"},
      {R"({"train_batch_size": 1.5})", "train_batch_size must be a whole number, not 1.5"},
      {R"({"train_batch_size": 0})", "train_batch_size is 0 but must be at least 1"},
      {R"({"gradient_clipping": -1})", "gradient_clipping is -1 but must be at least 0"},
      {R"({"steps_per_print": 0})", "steps_per_print is 0 but must be at least 1"},
      {R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})",
       "optimizer.params.betas must be a list of two numbers"},
      {R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.0]}}})", "each beta must be in [0, 1)"},
      {R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1}}})",
       "optimizer.type is \"SGD\", which ZeRO here does not offer | fix: use \"Adam\" or \"AdamW\""},
      {R"({"optimizer": {"params": {"lr": 0.1}}})", "optimizer has no \"type\""},
      {R"({"optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})",
       "fix: use the top-level \"gradient_clipping\" instead"},
      {R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})",
       "optimizer.params.amsgrad is true, which is not implemented here"},
      {R"({"scheduler": {"type": "OneCycle", "params": {}}})",
       "scheduler.type is \"OneCycle\", which is not implemented here | fix: use \"WarmupLR\""},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
       "scheduler.params.warmup_type is \"cosine\" but must be \"log\" or \"linear\""},
      {R"({"zero_optimization": {"stage": "2"}})", "zero_optimization.stage must be a number, not the string \"2\""},
      {R"({"zero_optimization": 2})", "zero_optimization must be an object"},
      {R"({"fp16": {"enabled": true}, "fp16": {"enabled": false}})", "the key \"fp16\" appears twice"},
      {R"({"train_batch_size": 8,})", "ds_config.json is not valid JSON"},
      {R"([1, 2])", "ds_config.json holds a list, not a DeepSpeed config object"},
  };
  for (const auto& c : cases) {
    const auto error = error_of([&] { parse(c.json); });
    EXPECT_TRUE(has(error, c.expected)) << "config " << c.json << "\n  error: " << error
                                        << "\n  expected: " << c.expected;
    EXPECT_TRUE(has(error, "ds_config.json")) << "the error does not name the file: " << error;
  }
}

// bf16/fp16 choose the precision; fp16's loss scaler keys are read with DeepSpeed's defaults;
// what is not applied is listed; both on is refused, as DeepSpeed refuses it.
TEST(DeepSpeedConfig, MixedPrecisionSections) {
  EXPECT_EQ(parse(R"({"train_batch_size": 8})").precision, "");
  EXPECT_EQ(parse(R"({"bf16": {"enabled": true}})").precision, "bf16");
  EXPECT_EQ(parse(R"({"bfloat16": {"enabled": true}})").precision, "bf16");  // DeepSpeed's older name
  EXPECT_EQ(parse(R"({"bf16": {"enabled": false}, "fp16": {"enabled": false}})").precision, "");
  const auto defaults = parse(R"({"fp16": {"enabled": true}})");
  EXPECT_EQ(defaults.precision, "fp16");
  EXPECT_EQ(defaults.fp16.loss_scale, 0);
  EXPECT_EQ(defaults.fp16.initial_scale_power, 16);
  EXPECT_EQ(defaults.fp16.loss_scale_window, 1000);
  EXPECT_EQ(defaults.fp16.hysteresis, 2);
  EXPECT_EQ(defaults.fp16.min_loss_scale, 1);
  EXPECT_TRUE(defaults.ignored.empty());
  const auto c = parse(R"({"fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
                                    "loss_scale_window": 500, "hysteresis": 3, "min_loss_scale": 0.5,
                                    "auto_cast": false, "consecutive_hysteresis": true, "loss_scael": 1}})");
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_DOUBLE_EQ(c.fp16.min_loss_scale, 0.5);
  EXPECT_TRUE(listed(c, "fp16.auto_cast: autocast always runs the forward in float16"));
  EXPECT_TRUE(listed(c, "fp16.consecutive_hysteresis: not applied here"));
  EXPECT_TRUE(listed(c, "fp16.loss_scael: unknown key, ignored (did you mean \"loss_scale\"?)"));
  EXPECT_FALSE(listed(c, "training stays in float32"));
  EXPECT_DOUBLE_EQ(parse(R"({"fp16": {"enabled": true, "loss_scale": 128}})").fp16.loss_scale, 128);
  EXPECT_TRUE(listed(parse(R"({"amp": {"enabled": true}})"), "amp: not applied here (NVIDIA Apex"));
  const auto both = error_of([] { parse(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})"); });
  EXPECT_TRUE(has(both, "fp16.enabled is true, and so is bf16.enabled")) << both;
  EXPECT_TRUE(has(both, "enable one of bf16 and fp16")) << both;
  EXPECT_TRUE(has(error_of([] { parse(R"({"fp16": {"enabled": "auto"}})"); }), "fp16.enabled must be true or false"));
  EXPECT_TRUE(has(error_of([] { parse(R"({"fp16": {"enabled": true, "hysteresis": 0}})"); }),
                  "fp16.hysteresis is 0 but must be at least 1"));
  EXPECT_TRUE(
      has(error_of([] { parse(R"({"fp16": {"enabled": true, "initial_scale_power": 200}})"); }), "is not a float32"));
}

TEST(DeepSpeedConfig, MissingFileIsNamed) {
  const auto error = error_of([] { ddpw::load_deepspeed_config("/nonexistent/ds_config.json"); });
  EXPECT_TRUE(has(error, "cannot read the DeepSpeed config '/nonexistent/ds_config.json'")) << error;
}

// DeepSpeed's WarmupLR (runtime/lr_schedules.py): gamma = log(iteration + 1) / log(max(2, N)) during
// warm-up (linear: iteration / N), then 1; the scheduler's iteration is -1 before the first step.
TEST(WarmupLR, PuhtiScheduleAsUnderDeepSpeedsEngine) {
  ddpw::WarmupLR schedule(*parse(kPuhtiConfig).scheduler);
  EXPECT_EQ(schedule.lr_at(0), 0.0);  // iteration -1: warmup_min_lr
  EXPECT_EQ(schedule.lr_at(1), 0.0);  // iteration 0: log(1) = 0
  EXPECT_DOUBLE_EQ(schedule.lr_at(2), 0.001 * std::log(2.0) / std::log(1000.0));
  EXPECT_DOUBLE_EQ(schedule.lr_at(500), 0.001 * std::log(500.0) / std::log(1000.0));
  EXPECT_DOUBLE_EQ(schedule.lr_at(1000), 0.001);  // iteration 999: log(1000) / log(1000)
  EXPECT_EQ(schedule.lr_at(1001), 0.001);         // warm-up over
  EXPECT_EQ(schedule.lr_at(50000), 0.001);
  for (int64_t step = 1; step < 1100; ++step) ASSERT_LE(schedule.lr_at(step), schedule.lr_at(step + 1)) << step;
}

TEST(WarmupLR, LinearCurveAndDefaults) {
  ddpw::WarmupLR linear({0.01, 0.11, 10, "linear"});
  EXPECT_DOUBLE_EQ(linear.lr_at(1), 0.01);
  EXPECT_DOUBLE_EQ(linear.lr_at(6), 0.01 + 0.1 * 5 / 10);
  EXPECT_DOUBLE_EQ(linear.lr_at(11), 0.11);
  // Without warmup_max_lr the warm-up climbs to the optimizer's lr (DeepSpeed).
  const auto c =
      parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02}}, "scheduler": {"type": "WarmupLR"}})");
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_max_lr, 0.02);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 1000);
  ddpw::WarmupLR one_step({0, 1, 1, "log"});  // N < 2 counts as 2, as in DeepSpeed
  EXPECT_EQ(one_step.lr_at(1), 0.0);
  EXPECT_DOUBLE_EQ(one_step.lr_at(2), 1.0);
}

}  // namespace
