#include "course/options.h"

#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/setting_names.h"  // defines: set_setting_name
#include "ddp/spawn.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <regex>
#include <sstream>

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

[[noreturn]] void usage_error(const std::string& program, const std::string& what, const std::string& fix) {
  std::fprintf(stderr, "%s: error: %s (fix: %s)\n", program.c_str(), what.c_str(), fix.c_str());
  std::exit(2);
}

// --model and --dataset, each from the other when one is missing; a pair that cannot train is refused.
void resolve_model(const std::string& program, Options& o, bool dataset_given) {
  if (o.model == "gpt" && !dataset_given) o.dataset = "fortunes";
  const std::string own = o.dataset == "synthetic" ? "linear" : o.dataset == "fortunes" ? "gpt" : "cnn";
  if (o.model.empty()) o.model = own;
  if (o.model == own) return;
  const std::string datasets = o.model == "gpt"   ? "fortunes (a text)"
                               : o.model == "cnn" ? "mnist, fashion-mnist or synthetic-images"
                                                  : "synthetic";
  usage_error(program, "--model " + o.model + " does not train on --dataset " + o.dataset,
              "give --dataset " + datasets + ", or leave --dataset out");
}

std::string format_number(double v) {
  std::ostringstream out;
  out << std::setprecision(15) << v;
  return out.str();
}

// CLI11's Range calls "abc" and "5.5" out of range ("Value abc not in range 1 to 10"): say what is
// wrong instead, and leave the fix in `fix` for the error line. `whole`: integers only.
CLI::Validator number_in(const std::string& name, double lo, double hi, bool whole, std::string& fix) {
  const std::string range =
      hi >= 1e18 ? "of " + format_number(lo) + " or more" : "from " + format_number(lo) + " to " + format_number(hi);
  const std::string kind = whole ? "a whole number" : "a number";
  CLI::Validator v(
      [=, &fix](std::string& input) -> std::string {
        static const std::regex integer("[+-]?[0-9]+");
        static const std::regex real("[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?");
        fix = "give " + name + " " + kind + " " + range;
        if (!std::regex_match(input, whole ? integer : real)) return "'" + input + "' is not " + kind;
        // strtold: 99999999999 must read as too big, not wrap around in an int.
        const long double value = std::strtold(input.c_str(), nullptr);
        if (value < lo || value > hi) return input + " is out of range";
        fix.clear();
        return "";
      },
      (whole ? "INT" : "FLOAT") + std::string(" in [") + format_number(lo) + " - " + format_number(hi) + "]");
  return v;
}

// Probes by creating, not by access(): access() says yes for root on /proc, where nothing can be
// created, and the run then fails at its first save. Leaves nothing behind: a uniquely named probe
// file is removed at once, and an existing target is opened for appending (never truncated).
void check_writable_file(const std::string& program, const std::string& option, const std::string& path,
                         bool written_in_place) {
  if (path.empty()) return;
  const std::string dir = parent_dir(path);
  if (!is_directory(dir))
    usage_error(program, option + " '" + path + "': folder '" + dir + "' does not exist",
                "create it (mkdir -p " + dir + ") or choose another path with " + option);
  if (is_directory(path))
    usage_error(program, option + " '" + path + "' is a folder, not a file", "name a file with " + option);
  std::string probe = (dir == "/" ? "" : dir) + "/." + base_name(path) + ".probe-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    usage_error(program,
                option + " '" + path + "': cannot create a file in folder '" + dir + "' (" + std::strerror(errno) + ")",
                "choose a path in a folder you can write with " + option);
  ::close(fd);
  ::unlink(probe.c_str());
  // The snapshot replaces its file by a rename (only the folder matters); the metrics CSV is
  // appended to in place.
  if (written_in_place && path_exists(path)) {
    const int existing = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (existing < 0)
      usage_error(program, option + " '" + path + "' cannot be written (" + std::strerror(errno) + ")",
                  "make it writable (chmod u+w " + path + ") or choose another path with " + option);
    ::close(existing);
  }
}

// The ranks a DeepSpeed batch size is divided by: what the launcher started (the library's own reading,
// which check_launch later holds the program to), else the trainer's --gpus x --nodes (it starts them).
int expected_world_size(const Options& o) {
  int world = 1;
  try {
    world = resolve_launch_env(current_environment(), launch_overrides(o)).world_size;
  } catch (const Error&) {
    // an inconsistent environment: check_launch reports it, with the fix, once the program asks
  }
  if (world == 1 && o.gpus > 0) world = o.gpus * std::max(1, o.nodes);
  return world;
}

// --zero / --strategy and the DeepSpeed config (kZeroOptions, kTrainerOptions): which strategy and
// ZeRO stage, and what of the config applies to every program alike (the batch size per rank,
// steps_per_print as the progress interval, reduce_bucket_size). `given_*`: the command line set it.
void apply_zero_settings(Options& o, int zero_flag, bool given_batch, bool given_log_every, bool given_bucket,
                         bool given_precision, bool trainer) {
  const bool config = !o.deepspeed_config_path.empty();
  if (config) o.deepspeed = load_deepspeed_config(o.deepspeed_config_path);
  const int config_stage = o.deepspeed.zero_stage > 0 ? o.deepspeed.zero_stage : 2;
  const int world = expected_world_size(o);
  if (trainer) {
    if (o.strategy.rfind("deepspeed_stage_", 0) == 0) o.strategy = "zero" + o.strategy.substr(16);
    if (o.strategy == "auto")
      o.strategy = config ? "zero" + std::to_string(config_stage) : world > 1 ? "ddp" : "single";
    if (o.strategy == "zero1" || o.strategy == "zero2") {
      o.zero_stage = o.strategy.back() - '0';
    } else if (config) {
      throw Error("--deepspeed-config applies to the ZeRO strategies, but the strategy is " + o.strategy,
                  "use --strategy zero1 or zero2 (or auto), or leave out --deepspeed-config");
    }
  } else {
    o.zero_stage = zero_flag > 0 ? zero_flag : config_stage;
    o.strategy = "zero" + std::to_string(o.zero_stage);
  }
  if (!config || o.zero_stage == 0) return;
  const DeepSpeedConfig& c = o.deepspeed;
  if (c.train_batch_size || c.train_micro_batch_size_per_gpu || c.gradient_accumulation_steps) {
    if (given_batch)
      throw Error(
          "the batch size is given twice: --batch-size " + std::to_string(o.batch_size) + " and " + c.origin +
              "'s batch keys",
          "leave out --batch-size (the config's train_batch_size is divided by the ranks), or the config's keys");
    const BatchSizes b = c.batch_sizes(world);
    if (b.gradient_accumulation_steps != 1)
      throw Error(c.origin + ": gradient_accumulation_steps " + std::to_string(b.gradient_accumulation_steps) +
                      ": the course's programs step the optimizer after every batch",
                  "set train_batch_size to train_micro_batch_size_per_gpu x the number of ranks (" +
                      std::to_string(world) + "), without gradient_accumulation_steps");
    o.batch_size = static_cast<int>(b.micro_batch_per_gpu);
  }
  if (!given_log_every) o.log_every = static_cast<int>(std::min<int64_t>(c.steps_per_print, 1 << 30));
  // DeepSpeed's bf16/fp16 sections choose the precision, unless --precision does; both saying
  // different things is a question only the user can answer.
  if (!c.precision.empty()) {
    if (given_precision && o.precision != c.precision)
      throw Error("the precision is given twice: --precision " + o.precision + " and " + c.origin + "'s " +
                      c.precision + ".enabled",
                  "leave out --precision (the config decides), or set " + c.precision + ".enabled to false");
    o.precision = c.precision;
  }
  if (!given_bucket && c.reduce_bucket_size) o.bucket_mb = std::max(0.001, *c.reduce_bucket_size * 4.0 / (1 << 20));
}

// The options a program does not offer but another step does: the fix names that step (or, in the
// exercise whose TODO adds them, the TODO).
std::string unoffered_option_fix(const ProgramId& p, const std::string& error) {
  auto mentions = [&](const char* option) { return error.find(option) != std::string::npos; };
  auto todo = [&](int step, const std::string& what) {
    return "complete TODO(step" + std::to_string(step) + ") in " + p.name + "/main.cpp: " + what;
  };
  if (mentions("--zero") || mentions("--deepspeed")) {
    if (p.kind == "exercise" && p.step == 4) return todo(4, "offer the ZeRO options (ddpw::kZeroOptions)");
    return "--zero and --deepspeed-config are ZeRO's: run step4_sharded, or step5_trainer --strategy zero2";
  }
  if (mentions("--reshard-after-forward") || mentions("--checkpoint-activations") || mentions("--accumulate")) {
    if (p.kind == "exercise" && p.step == 6) return todo(6, "offer the FSDP options (ddpw::kFsdpOptions)");
    return "--reshard-after-forward, --checkpoint-activations and --accumulate are FSDP's: run step6_fully_sharded";
  }
  if (mentions("--strategy") || mentions("--gpus") || mentions("--devices") || mentions("--nodes") ||
      mentions("--epochs") || mentions("--cuda-graph")) {
    if (p.kind == "exercise" && p.step == 5) return todo(5, "offer Lightning's options (ddpw::kTrainerOptions)");
    return "--strategy, --gpus, --nodes, --epochs and --cuda-graph are the trainer's (step5_trainer)";
  }
  return "";
}

}  // namespace

void name_library_settings() {
  static const std::pair<Setting, const char*> kFlags[] = {
      {Setting::kDevice, "--device"},
      {Setting::kBackend, "--backend"},
      {Setting::kRendezvousTimeout, "--rendezvous-timeout"},
      {Setting::kCollectiveTimeout, "--collective-timeout"},
      {Setting::kMasterPort, "--master-port"},
      {Setting::kBatchSize, "--batch-size"},
      {Setting::kWorkers, "--nproc"},
      {Setting::kThreads, "--threads"},
      {Setting::kSnapshotPath, "--snapshot"},
      {Setting::kFreshStart, "--fresh"},
      {Setting::kZeroStage, "--zero"},
      {Setting::kExportWeightsPath, "--export-weights"},
      {Setting::kCudaGraph, "--cuda-graph"},
  };
  for (const auto& [setting, flag] : kFlags) set_setting_name(setting, flag);
}

std::string default_snapshot_path(const ProgramId& p) {
  if (p.name.empty()) return "snapshot.pt";
  const std::string who = p.step >= 0 ? p.step_tag() : p.name;
  return "snapshot-" + who + (p.kind == "program" ? "" : "-" + p.kind) + ".pt";
}

Options parse_options(int argc, char** argv, unsigned groups, const ProgramId& program) {
  return parse_options(argc, argv, program.about.empty() ? program.label() : program.about, groups, {}, program);
}

Options parse_options(int argc, char** argv, const std::string& description, unsigned groups,
                      const ProgramId& program) {
  return parse_options(argc, argv, description, groups, {}, program);
}

Options parse_options(int argc, char** argv, const std::string& description, unsigned groups,
                      const AddOptions& add_options, const ProgramId& program_id) {
  name_library_settings();  // before the first library call below can word an error
  Options o;
  o.program = program_id;
  o.snapshot_path = default_snapshot_path(program_id);
  const std::string program = base_name(argv[0]);
  CLI::App app{description, program};
  // An option given twice keeps its last value: the batch scripts put their defaults (--device cuda,
  // --snapshot) first, so what the user adds after them wins.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string fix;  // set by a failing number check: the fix for the error line
  auto whole = [&](const std::string& name, double lo, double hi) { return number_in(name, lo, hi, true, fix); };
  auto real = [&](const std::string& name, double lo, double hi) { return number_in(name, lo, hi, false, fix); };

  const bool trainer = groups & kTrainerOptions, zero = groups & kZeroOptions;
  if (trainer) groups |= kDistributedOptions;
  CLI::Option* batch_size = nullptr;
  CLI::Option* log_every = nullptr;
  CLI::Option* epochs_given = nullptr;
  CLI::Option* precision = nullptr;
  CLI::Option* dataset = nullptr;
  CLI::Option* save_every_given = nullptr;
  int epochs_flag = 0;
  if (groups & kTrainingOptions) {
    // The trainer also takes Lightning's --epochs, so its positionals are optional.
    auto* epochs = app.add_option("total_epochs", o.total_epochs, "Epochs to train")
                       ->default_str("")
                       ->check(whole("total_epochs", 1, 1000000));
    save_every_given = app.add_option("save_every", o.save_every,
                                      "Write a snapshot every N epochs" +
                                          std::string(trainer ? " (default: every epoch, as Lightning)" : ""))
                           ->default_str("")
                           ->check(whole("save_every", 1, 1000000));
    if (trainer) {
      epochs_given = app.add_option("--epochs,--max-epochs", epochs_flag,
                                    "Epochs to train (Lightning's max_epochs; "
                                    "the same as the first positional)")
                         ->check(whole("--epochs", 1, 1000000));
    } else {
      epochs->required();
      save_every_given->required();
    }
    batch_size = app.add_option("--batch-size,--batch_size", o.batch_size,
                                "Samples per step on each rank (default: " + std::to_string(o.batch_size) +
                                    " synthetic, " + std::to_string(kCnnBatchSize) + " mnist/fashion-mnist)")
                     ->default_str("")
                     ->check(whole("--batch-size", 1, 1 << 20));
    app.add_option("--device", o.device, "auto (CUDA if available, else CPU), cpu, cuda or cuda:N");
    dataset =
        app.add_option("--dataset", o.dataset,
                       "Workload: synthetic (Linear(20,1)), mnist or fashion-mnist (the CNN), or synthetic-images "
                       "(generated 28x28 images for the CNN, 1.2 M parameters, no download)")
            ->check(CLI::IsMember({"synthetic", "mnist", "fashion-mnist", "synthetic-images", "fortunes"}));
    app.add_option("--model", o.model,
                   "linear, cnn or gpt (a character-level transformer; alone it trains on --dataset "
                   "fortunes); default: the dataset's own")
        ->check(CLI::IsMember({"linear", "cnn", "gpt"}));
    app.add_option("--gpt-size", o.gpt_size,
                   "The GPT's size: tiny (CPU: 2 layers, width 64, context 64), small (6, 384, 256), medium (12, "
                   "768, 512), large (24, 1024, 512) or xl (48, 1600, 1024)")
        ->check(CLI::IsMember({"tiny", "small", "medium", "large", "xl"}));
    app.add_option("--data-dir", o.data_dir,
                   "Folder with the four IDX files (.gz or not); for fortunes a folder of fortune files or one "
                   "plain text file");
    app.add_option("--test-batch-size", o.test_batch_size, "Samples per evaluation step")
        ->check(whole("--test-batch-size", 1, 1 << 20));
    app.add_option("--lr", o.lr, "Learning rate (0: the workload's default)")->check(real("--lr", 0, 1e6));
    app.add_option("--gamma", o.gamma, "Learning-rate decay per epoch (CNN)")->check(real("--gamma", 0, 1));
    // The largest seed is 2^64-1; CLI11 2.1 would read "-3" as 2^64-3 without a word.
    app.add_option("--seed", o.seed, "Seed for data, weights and the sampler")
        ->check(whole("--seed", 0, 18446744073709551615.0).description("UINT"));
    app.add_option("--threads", o.threads, "Intra-op threads per rank (0: cores / local ranks)")
        ->check(whole("--threads", 0, 1024));
    app.add_option("--snapshot", o.snapshot_path, "Snapshot file (resumed from if it exists)");
    app.add_flag("--fresh", o.fresh, "Ignore an existing snapshot and start from epoch 0");
    app.add_flag("--deterministic", o.deterministic,
                 "Deterministic kernels (cuDNN, cuBLAS): GPU runs that stop and resume end bit for bit equal");
    app.add_option("--metrics", o.metrics_path, "Per-epoch metrics CSV, written by rank 0");
    log_every = app.add_option("--log-every", o.log_every, "Progress line every N steps (0: every 30 s)")
                    ->check(whole("--log-every", 0, 1 << 30));
    app.add_option("--init-weights", o.init_weights_path,
                   "Start from a state_dict saved in Python by torch.save (a snapshot, if resumed, wins)");
    app.add_option("--export-weights", o.export_weights_path,
                   "At the end rank 0 writes the model's state_dict here, for Python's torch.load");
    app.add_option("--trace", o.trace_path,
                   "Write the ranks' timeline of --trace-steps steps (after the first " +
                       std::to_string(kTraceWarmupSteps) +
                       ") here as Chrome trace JSON: backward, the gradient all-reduces, each step (Perfetto "
                       "opens it; scripts/plot draws it)");
    app.add_option("--trace-steps", o.trace_steps, "Steps that --trace records")
        ->check(whole("--trace-steps", 1, 100000));
    app.add_option("--steps", o.steps,
                   "At most N steps per epoch (0: the whole epoch): short runs, e.g. to read the peak memory "
                   "that every rank prints at the end")
        ->check(whole("--steps", 0, 1 << 30));
    app.add_option("--sample-temperature", o.sample_temperature,
                   "The GPT's sample at the end of training (rank 0 prints a few lines): 0 picks the likeliest "
                   "character (greedy, the same every time); above 0 draws from softmax(logits / T) with --seed")
        ->check(real("--sample-temperature", 0, 100));
    precision = app.add_option("--precision", o.precision,
                               "fp32, or mixed precision: bf16 (autocast) or fp16 (autocast and loss scaling, "
                               "PyTorch's GradScaler); parameters and optimizer state stay float32")
                    ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  }
  // A program that starts its own workers (step 1) meets them on this node, at a port it picks
  // (upstream's multigpu.py fixes 12355: two jobs on one node then collide); the others take the
  // master from the launcher.
  const bool spawns = groups & kSpawnOptions;
  if (spawns)
    app.add_option("--nproc", o.nproc, "Workers to start when no GPU is visible (else one per GPU)")
        ->check(whole("--nproc", 1, 1024));
  CLI::Option* master_port = nullptr;
  CLI::Option* bucket_mb = nullptr;
  if (groups & kDistributedOptions) {
    if (!spawns) app.add_option("--master-addr", o.master_addr, "Rendezvous host (default: from the launcher)");
    master_port = app.add_option("--master-port", o.master_port,
                                 spawns ? "Rendezvous port on this node (default: a free port, chosen at start)"
                                        : "Rendezvous port (default: from the launcher)")
                      ->check(whole("--master-port", spawns ? 1 : 0, 65535));
    if (spawns) master_port->default_str("");  // not "=0": the default is chosen at start
    if (!spawns) app.add_option("--init-method", o.init_method, "file:///shared/path: rendezvous through a file");
    app.add_option("--backend", o.backend, "Process-group backend")->check(CLI::IsMember({"auto", "gloo", "nccl"}));
    bucket_mb = app.add_option("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB")
                    ->check(real("--bucket-mb", 0.001, 4096));
    app.add_flag("--find-unused-parameters", o.find_unused_parameters,
                 "Treat parameters without a gradient as zero instead of stopping with an error");
    app.add_flag("--bf16-compress", o.bf16_compress,
                 "DDP sends its gradient buckets as bfloat16 (PyTorch's bf16_compress_hook: half the bytes)");
    app.add_option("--rendezvous-timeout", o.rendezvous_timeout_s, "Seconds to wait for all ranks to arrive")
        ->check(real("--rendezvous-timeout", 0.1, 86400));
    app.add_option("--collective-timeout", o.collective_timeout_s, "Seconds before a collective is declared hung")
        ->check(real("--collective-timeout", 0.1, 86400));
    app.add_flag("--check-collectives", o.check_collectives,
                 "Before each collective, check that every rank calls the same one; a rank that differs stops "
                 "all at once, naming each rank's call (debugging; as TORCH_DISTRIBUTED_DEBUG=DETAIL)");
  }

  // Fully sharded data parallel (step 6).
  if (groups & kFsdpOptions) {
    o.fully_sharded = true;
    app.add_option("--reshard-after-forward", o.reshard_after_forward,
                   "true: free each unit's gathered weights after its forward and gather them again for backward "
                   "(PyTorch's reshard_after_forward, ZeRO-3); false: keep them until backward (less traffic, "
                   "more memory)")
        ->default_str("true");
    app.add_flag("--checkpoint-activations", o.checkpoint_activations,
                 "Keep no activations inside a unit: recompute its forward in backward (less memory, more compute)");
    app.add_option("--accumulate", o.accumulate,
                   "Micro-batches per optimizer step: the batch is cut into as many, each but the last backward "
                   "without communication (no_sync)")
        ->check(whole("--accumulate", 1, 1 << 16));
  }

  // ZeRO (step 4) and the trainer (step 5).
  int zero_flag = 0;
  if (zero)
    app.add_option("--zero", zero_flag,
                   "ZeRO stage: 1 shards the optimizer state over the ranks, 2 the gradients "
                   "too (default: the DeepSpeed config's zero_optimization.stage, else 2)")
        ->default_str("")
        ->check(whole("--zero", 1, 2));
  if (zero || trainer)
    app.add_option("--deepspeed-config,--deepspeed_config", o.deepspeed_config_path,
                   "DeepSpeed's ds_config.json: batch size, Adam/AdamW, WarmupLR, gradient clipping, steps_per_print, "
                   "ZeRO stage (other keys are listed as ignored)");
  if (trainer) {
    o.strategy = "auto";
    app.add_option("--strategy", o.strategy,
                   "auto (a DeepSpeed config: zero<its stage, else 2>; several ranks: ddp; else single), single, ddp, "
                   "zero1, zero2 (also Lightning's deepspeed_stage_1, deepspeed_stage_2)")
        ->check(CLI::IsMember({"auto", "single", "ddp", "zero1", "zero2", "deepspeed_stage_1", "deepspeed_stage_2"}));
    app.add_option("--gpus,--devices", o.gpus,
                   "Processes per node (Lightning's gpus/devices; on the CPU, processes). Alone, N > 1 starts N "
                   "workers here; under a launcher it must be what the launcher started (0: as launched)")
        ->check(whole("--gpus", 0, 1024));
    app.add_option("--nodes,--num-nodes", o.nodes,
                   "Nodes (Lightning's num_nodes): must be what the launcher "
                   "started (0: as launched)")
        ->check(whole("--nodes", 0, 100000));
    app.add_flag("--cuda-graph", o.cuda_graph,
                 "Capture the training step (forward, backward, allreduces, optimizer) in one CUDA graph after 3 "
                 "eager steps and replay it (single or ddp; NCCL; fp32; the CNN's Adadelta or the linear model's SGD; the "
                 "last, partial batch runs eagerly)");
  }

  if (add_options) add_options(app, o);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    // An exercise given the options its TODO adds fails on whatever the parser makes of them (step 5's
    // `--epochs 50 --strategy ddp` reads 50 and ddp as the positionals: "save_every: 'ddp' is not a
    // whole number"; `--epochs 1` alone: "save_every is required"): the error names those options,
    // the fix that TODO.
    std::string error = e.what();
    for (int i = 1; program_id.kind == "exercise" && i < argc; ++i) error += std::string(" ") + argv[i];
    const std::string todo_fix = program_id.kind == "exercise" ? unoffered_option_fix(program_id, error) : "";
    std::string given;  // the options of that TODO on this command line, which the parser does not know yet
    int count = 0;
    for (int i = 1; todo_fix.find("TODO(") != std::string::npos && i < argc; ++i) {
      const std::string word = argv[i];
      if (word.rfind("--", 0) == 0 && app.get_option_no_throw(word) == nullptr &&
          !unoffered_option_fix(program_id, word).empty() && given.find(word) == std::string::npos) {
        given += (given.empty() ? "" : ", ") + word;
        ++count;
      }
    }
    if (count > 0)
      usage_error(program,
                  given + (count == 1 ? " is not an option of " : " are not options of ") + program +
                      " yet (the parser read: " + e.what() + ")",
                  todo_fix);
    if (fix.empty()) fix = unoffered_option_fix(program_id, error);
    usage_error(program, e.what(), fix.empty() ? "see " + program + " --help" : fix);
  }

  static const std::regex device_form("auto|cpu|cuda|cuda:[0-9]+");
  if (!std::regex_match(o.device, device_form))
    usage_error(program, "--device '" + o.device + "' is not a device", "use auto, cpu, cuda or cuda:N");
  if ((groups & kDistributedOptions) && !o.init_method.empty() && o.init_method.rfind("file://", 0) != 0)
    usage_error(program, "--init-method '" + o.init_method + "' is not supported",
                "use file:///path/on/a/shared/filesystem, or leave it out for a TCP rendezvous");
  // --fresh starts this run over, not every restart of it: torchrun --max-restarts and a Slurm
  // requeue run the same command line again, and that attempt must resume from the snapshot.
  for (const char* restarts : {"TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"}) {
    const char* n = std::getenv(restarts);
    if (o.fresh && n && std::atoi(n) > 0) {
      std::fprintf(stderr, "%s: note: --fresh ignored: this is restart %s of the job (%s), which resumes\n",
                   program.c_str(), n, restarts);
      o.fresh = false;
    }
  }
  // Chosen after parsing, so --help and a bad option bind nothing (spawn.h: held until rank 0 serves).
  if (spawns && (master_port == nullptr || master_port->count() == 0)) {
    try {
      o.master_port = spawn_master_port();
    } catch (const Error& e) {
      usage_error(program, e.message(), e.hint());
    }
  }
  if (trainer && (groups & kTrainingOptions)) {
    if (epochs_given->count() > 0) {
      if (o.total_epochs > 0 && o.total_epochs != epochs_flag)
        usage_error(program,
                    "the epochs are given twice: " + std::to_string(o.total_epochs) + " and --epochs " +
                        std::to_string(epochs_flag),
                    "give one of them");
      o.total_epochs = epochs_flag;
    }
    if (o.total_epochs == 0)
      usage_error(program, "how many epochs?",
                  "give them as Lightning's --epochs N, or positionally: " + program + " 50 10");
    if (save_every_given->count() == 0) o.save_every = 1;
  }
  if (groups & kTrainingOptions) {
    resolve_model(program, o, dataset->count() > 0);
    // The CNN trains with the seed's batch of 64, unless --batch-size says otherwise.
    if (batch_size->count() == 0 && o.model == "cnn") o.batch_size = kCnnBatchSize;
    if (o.accumulate > 1 && o.batch_size % o.accumulate != 0)
      usage_error(program,
                  "--accumulate " + std::to_string(o.accumulate) + " does not divide --batch-size " +
                      std::to_string(o.batch_size) + " into equal micro-batches",
                  "choose a batch size that is a multiple of --accumulate");
    if (zero || trainer) {
      try {
        apply_zero_settings(o, zero_flag, batch_size->count() > 0, log_every->count() > 0,
                            bucket_mb != nullptr && bucket_mb->count() > 0, precision->count() > 0, trainer);
      } catch (const Error& e) {
        usage_error(program, e.message(), e.hint());
      }
    }
    check_writable_file(program, "--snapshot", o.snapshot_path, /*written_in_place=*/false);
    check_writable_file(program, "--metrics", o.metrics_path, /*written_in_place=*/true);
    check_writable_file(program, "--export-weights", o.export_weights_path, /*written_in_place=*/false);
    check_writable_file(program, "--trace", o.trace_path, /*written_in_place=*/false);
    if (!o.init_weights_path.empty() && !path_exists(o.init_weights_path))
      usage_error(program, "--init-weights '" + o.init_weights_path + "' does not exist",
                  "save it in Python with torch.save(model.state_dict(), path), or check the path");
  }
  // A program that starts its own workers, started by a launcher as one of several ranks: every
  // rank would start a set of its own (spawn() refuses too; here the fix can name the TODO).
  if (spawns && !is_spawned_worker()) {
    if (const std::string launcher = started_by_launcher(); !launcher.empty()) {
      std::fprintf(stderr,
                   "error: %s starts its own workers, but was started by %s, so every rank would start a set of "
                   "its own (fix: run it without the launcher, or complete TODO(step2) to read the ranks from the "
                   "environment)\n",
                   program.c_str(), launcher.c_str());
      std::exit(kExitError);
    }
  }
  return o;
}

LaunchOverrides launch_overrides(const Options& o) {
  LaunchOverrides l;
  if (!o.master_addr.empty()) l.master_addr = o.master_addr;
  if (o.master_port > 0) l.master_port = o.master_port;
  if (!o.init_method.empty()) l.init_method = o.init_method;
  return l;
}

}  // namespace ddpw
