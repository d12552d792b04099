#include "course/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>  // defines: nlohmann::ordered_json (keeps the file's key order)
#include <set>
#include <sstream>

#include "ddp/error.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

using Json = nlohmann::ordered_json;

// DeepSpeed settings we read but do not apply, with why (shown to the user).
const std::map<std::string, std::string>& known_top_level() {
  static const std::map<std::string, std::string> keys = {
      {"prescale_gradients", "gradients are always divided by the world size before they are summed (same average)"},
      {"gradient_predivide_factor", "gradients are divided by the world size before they are summed"},
      {"wall_clock_breakdown", "no timer breakdown; the epoch report times every epoch"},
      {"memory_breakdown", "no memory breakdown; bench/zero_memory_bench measures memory"},
      {"amp", "NVIDIA Apex's mixed precision: use \"bf16\" or \"fp16\" (autocast, PyTorch's GradScaler)"},
      {"communication_data_type", "gradients are communicated in the parameters' dtype"},
      {"zero_allow_untested_optimizer", "only Adam/AdamW are offered"},
      {"zero_force_ds_cpu_optimizer", "the optimizer runs where the parameters are"},
      {"sparse_gradients", "dense gradients only"},
      {"activation_checkpointing", "not implemented here"},
      {"flops_profiler", "not implemented here"},
      {"tensorboard", "use --metrics (CSV) instead"},
      {"wandb", "use --metrics (CSV) instead"},
      {"csv_monitor", "use --metrics (CSV) instead"},
      {"comms_logger", "not implemented here"},
      {"elasticity", "not implemented here"},
      {"checkpoint", "snapshots are sharded per rank with a manifest (--snapshot)"},
      {"data_types", "not implemented here"},
      {"dump_state", "not implemented here"},
      {"sparse_attention", "not implemented here"},
      {"pipeline", "not implemented here"},
      {"aio", "not implemented here"},
      {"autotuning", "not implemented here"},
      {"compression_training", "not implemented here"},
      {"data_efficiency", "not implemented here"},
      {"curriculum_learning", "not implemented here"},
      {"progressive_layer_drop", "not implemented here"},
      {"eigenvalue", "not implemented here"},
      {"quantize_training", "not implemented here"},
      {"compile", "not implemented here"},
      {"seed", "use --seed"},
  };
  return keys;
}

const std::map<std::string, std::string>& known_zero_keys() {
  static const std::map<std::string, std::string> keys = {
      {"overlap_comm", "always on: each bucket is reduced while backward goes on"},
      {"contiguous_gradients", "always on: gradients live in flat buckets"},
      {"reduce_scatter", "stage 2 always reduce-scatters (stage 1 allreduces)"},
      {"allgather_partitions", "the parameters are always all-gathered after the step"},
      {"allgather_bucket_size", "one all-gather per gradient bucket"},
      {"round_robin_gradients", "not implemented here"},
      {"offload_optimizer", "the optimizer state stays on the training device"},
      {"offload_param", "the parameters stay on the training device"},
      {"cpu_offload", "the optimizer state stays on the training device"},
      {"sub_group_size", "not implemented here"},
      {"load_from_fp32_weights", "the parameters and Adam's state are always float32"},
      {"elastic_checkpoint", "a snapshot reshards to another world size by itself"},
      {"ignore_unused_parameters", "a parameter without a gradient is an error naming it"},
      {"legacy_stage1", "not implemented here"},
      {"zero_hpz_partition_size", "not implemented here"},
      {"zero_quantized_weights", "not implemented here"},
      {"zero_quantized_gradients", "not implemented here"},
      {"mics_shard_size", "not implemented here"},
      {"use_multi_rank_bucket_allreduce", "not implemented here"},
      {"memory_efficient_linear", "not implemented here"},
  };
  return keys;
}

const std::vector<std::string> kAppliedTopLevel = {"train_batch_size",
                                                   "train_micro_batch_size_per_gpu",
                                                   "gradient_accumulation_steps",
                                                   "optimizer",
                                                   "scheduler",
                                                   "gradient_clipping",
                                                   "steps_per_print",
                                                   "zero_optimization",
                                                   "bf16",
                                                   "fp16"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string type_name(const Json& value) {
  if (value.is_string()) return "the string " + value.dump();
  if (value.is_boolean()) return value.dump();
  if (value.is_null()) return "null";
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  return value.dump();
}

class Reader {
 public:
  explicit Reader(DeepSpeedConfig& config) : c_(config) {}

  Error bad(const std::string& key, const std::string& what, const std::string& hint) const {
    return Error(c_.origin + ": " + key + " " + what, hint);
  }

  double number(const Json& value, const std::string& key) const {
    if (value.is_number()) return value.get<double>();
    if (value.is_string() && value.get<std::string>() == "auto")
      throw bad(key, "is \"auto\"",
                "\"auto\" is filled in by the Hugging Face Trainer, not by DeepSpeed: write a number");
    throw bad(key, "must be a number, not " + type_name(value),
              value.is_string() ? "write it without quotes, e.g. \"" + leaf(key) + "\": " + value.get<std::string>()
                                : "write a number");
  }

  double number_at_least(const Json& value, const std::string& key, double minimum) const {
    const double v = number(value, key);
    if (!std::isfinite(v) || v < minimum)
      throw bad(key, "is " + value.dump() + " but must be at least " + fmt(minimum),
                "choose a value >= " + fmt(minimum));
    return v;
  }

  // DeepSpeed files often write sizes as 2e8: an integral float is fine, 1.5 is not.
  int64_t integer_at_least(const Json& value, const std::string& key, int64_t minimum) const {
    const double v = number(value, key);
    if (!std::isfinite(v) || v != std::floor(v) || std::fabs(v) > 9e15)
      throw bad(key, "must be a whole number, not " + value.dump(),
                "write an integer, e.g. \"" + leaf(key) + "\": " + std::to_string(std::max<int64_t>(minimum, 1)));
    if (v < static_cast<double>(minimum))
      throw bad(key, "is " + value.dump() + " but must be at least " + std::to_string(minimum),
                "choose a value >= " + std::to_string(minimum));
    return static_cast<int64_t>(v);
  }

  bool boolean(const Json& value, const std::string& key) const {
    if (!value.is_boolean()) throw bad(key, "must be true or false, not " + type_name(value), "write true or false");
    return value.get<bool>();
  }

  const Json& object(const Json& value, const std::string& key) const {
    if (!value.is_object())
      throw bad(key, "must be an object { ... }, not " + type_name(value), "see DeepSpeed's config docs");
    return value;
  }

  void ignore(const std::string& key, const std::string& why) { c_.ignored.push_back(key + ": " + why); }

  // A key nobody knows: say so, with the nearest known spelling.
  void unknown(const std::string& path, const std::string& key, const std::vector<std::string>& known) {
    std::string best;
    size_t best_distance = 4;  // farther than 3 edits: no suggestion
    for (const auto& k : known) {
      const size_t d = edit_distance(lower(key), lower(k));
      if (d < best_distance) best_distance = d, best = k;
    }
    ignore(path + key, best.empty() ? "unknown key, ignored" : "unknown key, ignored (did you mean \"" + best + "\"?)");
  }

  void read_optimizer(const Json& section) {
    object(section, "optimizer");
    AdamConfig adam;
    std::optional<bool> adam_w_mode;
    bool has_type = false;
    for (const auto& [key, value] : section.items()) {
      if (key == "type") {
        if (!value.is_string())
          throw bad("optimizer.type", "must be a string, not " + type_name(value), "write \"AdamW\"");
        adam.type = value.get<std::string>();
        const std::string t = lower(adam.type);
        if (t != "adam" && t != "adamw")
          throw bad("optimizer.type", "is \"" + adam.type + "\", which ZeRO here does not offer",
                    "use \"Adam\" or \"AdamW\" (the Puhti example's), or remove the optimizer section to use the "
                    "program's own settings");
        has_type = true;
      } else if (key == "params") {
        object(value, "optimizer.params");
        for (const auto& [name, v] : value.items()) {
          const std::string k = "optimizer.params." + name;
          if (name == "lr") {
            adam.lr = number_at_least(v, k, 0);
          } else if (name == "betas") {
            if (!v.is_array() || v.size() != 2)
              throw bad(k, "must be a list of two numbers, not " + v.dump(), "write e.g. \"betas\": [0.9, 0.999]");
            adam.beta1 = number(v[0], k + "[0]");
            adam.beta2 = number(v[1], k + "[1]");
            for (double b : {adam.beta1, adam.beta2})
              if (!(b >= 0 && b < 1))
                throw bad(k, "is " + v.dump() + " but each beta must be in [0, 1)", "e.g. [0.9, 0.999]");
          } else if (name == "eps") {
            adam.eps = number_at_least(v, k, 0);
          } else if (name == "weight_decay") {
            adam.weight_decay = number_at_least(v, k, 0);
          } else if (name == "adam_w_mode") {
            adam_w_mode = boolean(v, k);
          } else if (name == "torch_adam") {
            boolean(v, k);
            ignore(k, "the multi-tensor Adam/AdamW here follows torch.optim.AdamW either way");
          } else if (name == "bias_correction") {
            if (!boolean(v, k))
              throw bad(k, "is false, which is not implemented here", "remove it (bias correction on)");
          } else if (name == "amsgrad" || name == "maximize") {
            if (boolean(v, k)) throw bad(k, "is true, which is not implemented here", "remove it");
          } else if (name == "max_grad_norm") {
            throw bad(k, "is not an optimizer setting in DeepSpeed", "use the top-level \"gradient_clipping\" instead");
          } else {
            unknown("optimizer.params.", name, {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "torch_adam"});
          }
        }
      } else {
        unknown("optimizer.", key, {"type", "params"});
      }
    }
    if (!has_type) throw bad("optimizer", "has no \"type\"", "add \"type\": \"AdamW\"");
    adam.decoupled_weight_decay = lower(adam.type) == "adamw" || adam_w_mode.value_or(true);
    c_.optimizer = adam;
  }

  void read_scheduler(const Json& section) {
    object(section, "scheduler");
    WarmupLRConfig warmup;
    std::optional<double> max_lr;
    bool has_type = false;
    for (const auto& [key, value] : section.items()) {
      if (key == "type") {
        if (!value.is_string() || value.get<std::string>() != "WarmupLR")
          throw bad("scheduler.type", "is " + value.dump() + ", which is not implemented here",
                    "use \"WarmupLR\" (the Puhti example's), or remove the scheduler section for a constant rate");
        has_type = true;
      } else if (key == "params") {
        object(value, "scheduler.params");
        for (const auto& [name, v] : value.items()) {
          const std::string k = "scheduler.params." + name;
          if (name == "warmup_min_lr") {
            warmup.warmup_min_lr = number_at_least(v, k, 0);
          } else if (name == "warmup_max_lr") {
            max_lr = number_at_least(v, k, 0);
          } else if (name == "warmup_num_steps") {
            warmup.warmup_num_steps = integer_at_least(v, k, 0);
          } else if (name == "warmup_type") {
            if (!v.is_string() || (v.get<std::string>() != "log" && v.get<std::string>() != "linear"))
              throw bad(k, "is " + v.dump() + " but must be \"log\" or \"linear\"",
                        "write \"log\" (the default) or \"linear\"");
            warmup.warmup_type = v.get<std::string>();
          } else if (name == "last_batch_iteration") {
            integer_at_least(v, k, -1);
            ignore(k, "a resumed run takes its step from the snapshot");
          } else {
            unknown("scheduler.params.", name, {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"});
          }
        }
      } else {
        unknown("scheduler.", key, {"type", "params"});
      }
    }
    if (!has_type) throw bad("scheduler", "has no \"type\"", "add \"type\": \"WarmupLR\"");
    // DeepSpeed: without warmup_max_lr the schedule climbs to the optimizer's lr.
    warmup.warmup_max_lr = max_lr.value_or(c_.optimizer ? c_.optimizer->lr : 1e-3);
    c_.scheduler = warmup;
  }

  void read_zero(const Json& section) {
    if (section.is_boolean()) {  // DeepSpeed's old form: true means stage 1
      c_.zero_stage = section.get<bool>() ? 1 : 0;
      return;
    }
    object(section, "zero_optimization");
    for (const auto& [key, value] : section.items()) {
      const std::string k = "zero_optimization." + key;
      if (key == "stage") {
        const int64_t stage = integer_at_least(value, k, 0);
        if (stage == 3)
          throw bad(k, "is 3 (the parameters sharded too), which is not implemented here",
                    "use stage 1 (optimizer state sharded) or 2 (and gradients)");
        if (stage > 3) throw bad(k, "is " + value.dump() + " but must be 0, 1 or 2", "use 1 or 2");
        c_.zero_stage = static_cast<int>(stage);
      } else if (key == "reduce_bucket_size") {
        c_.reduce_bucket_size = integer_at_least(value, k, 1);
      } else if (known_zero_keys().count(key)) {
        ignore(k, "not applied here (" + known_zero_keys().at(key) + ")");
      } else if (key.rfind("stage3_", 0) == 0) {
        ignore(k, "not applied here (stage 3 is not implemented)");
      } else {
        std::vector<std::string> known{"stage", "reduce_bucket_size"};
        for (const auto& [name, why] : known_zero_keys()) known.push_back(name);
        unknown("zero_optimization.", key, known);
      }
    }
  }

  // "bf16" (or DeepSpeed's older "bfloat16") and "fp16": which one is on, and fp16's loss scaler.
  void read_precision(const std::string& section_name, const Json& section) {
    const bool fp16 = section_name == "fp16";
    object(section, section_name);
    bool enabled = false;
    for (const auto& [key, value] : section.items()) {
      const std::string k = section_name + "." + key;
      LossScaleConfig& l = c_.fp16;
      if (key == "enabled") {
        enabled = boolean(value, k);
      } else if (fp16 && key == "loss_scale") {
        l.loss_scale = number_at_least(value, k, 0);
      } else if (fp16 && key == "initial_scale_power") {
        l.initial_scale_power = integer_at_least(value, k, 0);
        if (l.initial_scale_power > 126)
          throw bad(k, "is " + value.dump() + ": 2 to that power is not a float32", "use at most 126 (16 is usual)");
      } else if (fp16 && key == "loss_scale_window") {
        l.loss_scale_window = integer_at_least(value, k, 1);
      } else if (fp16 && key == "hysteresis") {
        l.hysteresis = integer_at_least(value, k, 1);
      } else if (fp16 && key == "min_loss_scale") {
        l.min_loss_scale = number_at_least(value, k, 0);
      } else if (fp16 && key == "consecutive_hysteresis") {
        if (boolean(value, k))
          ignore(k, "not applied here (the hysteresis is refilled only when the scale grows, DeepSpeed's default)");
      } else if (fp16 && key == "auto_cast") {
        boolean(value, k);
        ignore(k, "autocast always runs the forward in float16; the parameters stay float32");
      } else if (key == "fp16_master_weights_and_grads" || key == "bf16_master_weights_and_grads" ||
                 key == "bf16_optimizer_states" || key == "immediate_grad_update" || key == "check_grad_overflow") {
        ignore(k, "not applied here (parameters, gradients and Adam's state are float32; autocast lowers the forward)");
      } else if (fp16) {
        unknown("fp16.", key,
                {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
                 "consecutive_hysteresis", "auto_cast"});
      } else {
        unknown(section_name + ".", key, {"enabled"});
      }
    }
    if (!enabled) return;
    const std::string precision = fp16 ? "fp16" : "bf16";
    if (!c_.precision.empty() && c_.precision != precision)
      throw bad(section_name + ".enabled", "is true, and so is " + c_.precision + ".enabled",
                "enable one of bf16 and fp16 (DeepSpeed refuses both too)");
    c_.precision = precision;
  }

  void read(const Json& root) {
    if (!root.is_object())
      throw Error(c_.origin + " holds " + type_name(root) + ", not a DeepSpeed config object",
                  "the file must be one JSON object { \"train_batch_size\": ..., ... }");
    // The optimizer first: the scheduler's default peak is its lr.
    if (root.contains("optimizer")) read_optimizer(root.at("optimizer"));
    for (const auto& [key, value] : root.items()) {
      if (key == "train_batch_size") {
        c_.train_batch_size = integer_at_least(value, key, 1);
      } else if (key == "train_micro_batch_size_per_gpu") {
        c_.train_micro_batch_size_per_gpu = integer_at_least(value, key, 1);
      } else if (key == "gradient_accumulation_steps") {
        c_.gradient_accumulation_steps = integer_at_least(value, key, 1);
      } else if (key == "optimizer") {
        continue;  // read above
      } else if (key == "scheduler") {
        read_scheduler(value);
      } else if (key == "gradient_clipping") {
        c_.gradient_clipping = number_at_least(value, key, 0);
      } else if (key == "steps_per_print") {
        c_.steps_per_print = integer_at_least(value, key, 1);
      } else if (key == "zero_optimization") {
        read_zero(value);
      } else if (key == "bf16" || key == "bfloat16" || key == "fp16") {
        read_precision(key == "fp16" ? "fp16" : key, value);
      } else if (known_top_level().count(key)) {
        ignore(key, "not applied here (" + known_top_level().at(key) + ")");
      } else {
        std::vector<std::string> known = kAppliedTopLevel;
        for (const auto& [name, why] : known_top_level()) known.push_back(name);
        unknown("", key, known);
      }
    }
  }

 private:
  static std::string leaf(const std::string& key) {
    const auto dot = key.find_last_of('.');
    return dot == std::string::npos ? key : key.substr(dot + 1);
  }
  static std::string fmt(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  }
  DeepSpeedConfig& c_;
};

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const std::string& json_text, const std::string& origin) {
  DeepSpeedConfig config;
  config.origin = origin;
  // DeepSpeed refuses a key written twice in one object; JSON parsers keep the last silently.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const Json::parser_callback_t watch_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == Event::key && !open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json root;
  try {
    root = Json::parse(json_text, watch_keys);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(origin + " is not valid JSON: " + std::string(e.what()),
                "fix the syntax at that place (JSON has no comments and no trailing commas)");
  }
  if (!duplicate.empty())
    throw Error(
        origin + ": the key \"" + duplicate + "\" appears twice in the same object (DeepSpeed refuses this too)",
        "keep one of them");
  Reader(config).read(root);
  return config;
}

DeepSpeedConfig load_deepspeed_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot read the DeepSpeed config '" + path + "': " + std::strerror(errno),
                "check the path given to --deepspeed-config");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_deepspeed_config(text.str(), path);
}

BatchSizes DeepSpeedConfig::batch_sizes(int world_size) const {
  DDP_CHECK(world_size >= 1, "world size must be at least 1", "report this");
  const int64_t w = world_size;
  BatchSizes b;
  // DeepSpeed's order of derivations (runtime/config.py), integer division as there, then the check.
  if (train_batch_size && train_micro_batch_size_per_gpu && gradient_accumulation_steps) {
    b = {*train_batch_size, *train_micro_batch_size_per_gpu, *gradient_accumulation_steps};
  } else if (train_batch_size && train_micro_batch_size_per_gpu) {
    b = {*train_batch_size, *train_micro_batch_size_per_gpu, *train_batch_size / *train_micro_batch_size_per_gpu / w};
  } else if (train_batch_size && gradient_accumulation_steps) {
    b = {*train_batch_size, *train_batch_size / w / *gradient_accumulation_steps, *gradient_accumulation_steps};
  } else if (train_micro_batch_size_per_gpu && gradient_accumulation_steps) {
    b = {*train_micro_batch_size_per_gpu * *gradient_accumulation_steps * w, *train_micro_batch_size_per_gpu,
         *gradient_accumulation_steps};
  } else if (train_batch_size) {
    b = {*train_batch_size, *train_batch_size / w, 1};
  } else if (train_micro_batch_size_per_gpu) {
    b = {*train_micro_batch_size_per_gpu * w, *train_micro_batch_size_per_gpu, 1};
  } else {
    throw Error(origin + " sets neither train_batch_size nor train_micro_batch_size_per_gpu",
                "add one, e.g. \"train_batch_size\": 400 (samples per optimizer step, all ranks together)");
  }
  const int64_t product = b.micro_batch_per_gpu * b.gradient_accumulation_steps * w;
  if (b.micro_batch_per_gpu < 1 || b.gradient_accumulation_steps < 1 || product != b.train_batch_size) {
    std::string fix = "with " + std::to_string(w) + " rank(s), make train_batch_size a multiple of " +
                      std::to_string(w * std::max<int64_t>(b.gradient_accumulation_steps, 1));
    if (!train_micro_batch_size_per_gpu) fix += ", or give train_micro_batch_size_per_gpu instead";
    throw Error(origin + ": train_batch_size " + std::to_string(b.train_batch_size) +
                    " is not train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size (" +
                    std::to_string(b.micro_batch_per_gpu) + " x " + std::to_string(b.gradient_accumulation_steps) +
                    " x " + std::to_string(w) + " = " + std::to_string(product) + ")",
                fix);
  }
  return b;
}

}  // namespace ddpw
