#include "course/run_report.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "course/workload.h"
#include "course/zero_settings.h"
#include "ddp/config.h"  // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/device.h"
#include "ddp/host.h"
#include "ddp/process_group.h"
#include "ddp/threads.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

// Rows travel through the store as "field\tfield\t...".
std::vector<std::string> split_tabs(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string field;
  while (std::getline(in, field, '\t')) out.push_back(field);
  return out;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (size_t k = 0; k < rows.size(); ++k) {
    std::string line;
    for (size_t i = 0; i < rows[k].size(); ++i)
      line += (i ? " | " : "") + rows[k][i] + std::string(width[i] - rows[k][i].size(), ' ');
    std::printf("%s\n", line.c_str());
    if (k == 0) {
      std::string rule;
      for (size_t i = 0; i < width.size(); ++i) rule += (i ? "-+-" : "") + std::string(width[i], '-');
      std::printf("%s\n", rule.c_str());
    }
  }
  std::fflush(stdout);
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// The folder as an absolute path: a relative default (data/mnist) depends on where the job ran.
std::string absolute(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? resolved : path + " (not found)";
}

// "8 (SLURM_CPUS_PER_TASK=16 / 2 workers)": where the count comes from, when it is thread_choice's.
std::string threads_with_reason(const Options& o, const LaunchEnv& launch, int threads) {
  const ThreadChoice choice = thread_choice(o.threads, launch.local_world_size);
  return std::to_string(threads) + (choice.count == threads ? " (" + choice.why + ")" : "");
}

}  // namespace

void print_settings(const Options& o, const LaunchEnv& launch, const torch::Device& device, int threads,
                    int global_rank) {
  if (global_rank != 0) return;
  const char* workspace = std::getenv("CUBLAS_WORKSPACE_CONFIG");  // set by configure_compute
  const std::string cublas_workspace = workspace ? workspace : "";
  std::vector<std::vector<std::string>> rows = {
      {"setting", "value"},
      {"launcher", launch.launcher},
      {"world size", std::to_string(launch.world_size)},
      {"ranks per node", std::to_string(launch.local_world_size)},
      {"rendezvous", launch.world_size == 1 && launch.launcher == "none" ? "(none: one process)"
                     : launch.init_method.empty() ? launch.master_addr + ":" + std::to_string(launch.master_port)
                                                  : launch.init_method},
      {"device (rank 0)", device_name(device)},
      {"threads per rank", threads_with_reason(o, launch, threads)},
      {"dataset", o.dataset},
      {"data folder", o.dataset.rfind("synthetic", 0) == 0 ? "(none: generated)" : absolute(data_folder(o))},
      {"epochs / save every", std::to_string(o.total_epochs) + " / " + std::to_string(o.save_every)},
      {"batch size per rank", std::to_string(o.batch_size)},
      {"global batch size", std::to_string(o.batch_size * launch.world_size)},
      {"test batch size", std::to_string(o.test_batch_size)},
      {"learning rate", number(base_learning_rate(o)) + (o.dataset == "synthetic"  ? " (SGD)"
                                                         : o.dataset == "fortunes" ? " (AdamW)"
                                                                                   : " (Adadelta)")},
      {"StepLR gamma",
       o.dataset == "synthetic" || o.dataset == "fortunes" ? "(none: constant rate)" : number(o.gamma) + " per epoch"},
      {"seed", std::to_string(o.seed)},
      {"deterministic", o.deterministic ? "on (CUBLAS_WORKSPACE_CONFIG=" + cublas_workspace + ")"
                                        : "off (--deterministic: GPU runs resume bit for bit)"},
      {"snapshot", o.snapshot_path},
      {"metrics", o.metrics_path.empty() ? "(none)" : o.metrics_path},
      {"LibTorch", DDPW_TORCH_VERSION},
  };
  // The weights bridge to Python (weights_io.h): rows only when used.
  using Row = std::vector<std::string>;
  // ZeRO (step 4, the trainer's zero1/zero2) trains with Adam, its rate set every step.
  const auto at = [&](const std::string& key) {
    return std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r[0] == key; });
  };
  if (!o.strategy.empty()) rows.insert(at("dataset"), Row{"strategy", o.strategy});
  if (o.steps > 0) rows.insert(at("batch size per rank"), Row{"steps per epoch", "at most " + std::to_string(o.steps)});
  if (o.dataset == "fortunes") rows.insert(at("data folder"), Row{"model", "gpt, --gpt-size " + o.gpt_size});
  // Mixed precision: rows only when used (an fp32 run prints what it printed before).
  if (o.precision != "fp32") rows.insert(at("seed"), Row{"precision", describe_precision(o)});
  if (o.bf16_compress) rows.insert(at("seed"), Row{"gradient allreduce", "bfloat16 (PyTorch's bf16_compress_hook)"});
  if (o.zero_stage > 0) {
    const std::string ranks = std::to_string(launch.world_size) + " rank(s)";
    *at("learning rate") = Row{"optimizer", describe_adam(o)};
    *at("StepLR gamma") = Row{"learning rate", describe_schedule(o)};
    const double clip = o.deepspeed.gradient_clipping;
    rows.insert(at("seed"),
                {Row{"ZeRO stage", o.zero_stage == 1 ? "1: optimizer state sharded over " + ranks
                                                     : "2: optimizer state and gradients sharded over " + ranks},
                 Row{"gradient clipping", clip > 0 ? "global norm " + number(clip) : "(none)"},
                 Row{"DeepSpeed config", o.deepspeed_config_path.empty() ? "(none)" : o.deepspeed_config_path}});
  }
  if (o.fully_sharded) {  // step 6: FSDP trains with AdamW on the shards (adam_options), its rate per step
    *at("learning rate") = Row{"optimizer", describe_adam(o)};
    *at("StepLR gamma") = Row{"learning rate", describe_schedule(o)};
    rows.insert(at("seed"),
                {Row{"FSDP", "parameters, gradients and optimizer state sharded over " +
                                 std::to_string(launch.world_size) + " rank(s)"},
                 Row{"reshard after forward", o.reshard_after_forward ? "true" : "false (kept until backward)"},
                 Row{"activation checkpointing", o.checkpoint_activations ? "on" : "off"},
                 Row{"accumulate", std::to_string(o.accumulate) + " micro-batch(es) of " +
                                       std::to_string(o.batch_size / o.accumulate) + " per step"}});
  }
  if (!o.init_weights_path.empty()) rows.insert(rows.end() - 1, Row{"initial weights", o.init_weights_path});
  if (!o.export_weights_path.empty()) rows.insert(rows.end() - 1, Row{"export weights to", o.export_weights_path});
  print_table(rows);
  for (const auto& ignored : o.deepspeed.ignored)
    std::printf("note: %s: %s\n", o.deepspeed.origin.c_str(), ignored.c_str());
  if (!launch.warning.empty()) std::printf("warning: %s\n", launch.warning.c_str());
  std::fflush(stdout);
}

void print_rank_table(ProcessGroup* pg, const LaunchEnv& launch, const torch::Device& device,
                      const std::vector<std::pair<std::string, std::string>>& extra) {
  // The bus id tells GPUs apart where per-task CUDA_VISIBLE_DEVICES make every rank "cuda:0".
  std::string mine = std::to_string(launch.global_rank) + "\t" + host_name() + "\t" +
                     std::to_string(launch.local_rank) + "\t" + device_name(device) + "\t" +
                     (device.is_cuda() ? gpu_bus_id(device) : "-");
  for (const auto& [name, value] : extra) mine += "\t" + (value.empty() ? std::string("-") : value);
  const auto all = pg ? pg->all_gather_strings(mine) : std::vector<std::string>{mine};
  if (launch.global_rank != 0) return;
  std::vector<std::vector<std::string>> rows{{"rank", "host", "local rank", "device", "GPU bus id"}};
  for (const auto& [name, value] : extra) rows[0].push_back(name);
  bool any_gpu = false;
  for (const auto& row : all) {
    rows.push_back(split_tabs(row));
    any_gpu = any_gpu || rows.back().at(4) != "-";
  }
  if (!any_gpu)  // a CPU run: the column would only say "-"
    for (auto& row : rows) row.erase(row.begin() + 4);
  print_table(rows);
}

}  // namespace ddpw
