// defines: Options (every setting of the course's programs) and parse_options (CLI11; --help is
//          generated from the parser, errors are one line with the fix, exit code 2).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "course/deepspeed_config.h"
#include "course/program.h"
#include "ddp/launch_env.h"

namespace CLI {
class App;
}

namespace ddpw {

inline constexpr int kCnnBatchSize = 64;     // --dataset mnist|fashion-mnist: the seed's batch
inline constexpr int kTraceWarmupSteps = 5;  // --trace skips the run's first steps (allocations, threads starting)

struct Options {
  // The upstream tutorial's positional form: `step0_single_gpu 50 10`.
  int total_epochs = 0;
  int save_every = 0;
  int batch_size = 32;  // parse_options makes it kCnnBatchSize for the CNN unless given

  std::string device = "auto";        // auto | cpu | cuda | cuda:N
  std::string dataset = "synthetic";  // synthetic | mnist | fashion-mnist | synthetic-images | fortunes
  std::string data_dir;               // default: where the dataset usually lives (see workload.h)
  // --model: parse_options resolves it from --dataset when not given (linear: synthetic; cnn: the
  // images; gpt: fortunes), and --model gpt alone picks --dataset fortunes.
  std::string model;              // linear | cnn | gpt
  std::string gpt_size = "tiny";  // --gpt-size: tiny | small | medium | large | xl (models.h)
  int test_batch_size = 1000;
  double lr = 0;       // 0: the workload's default (SGD 1e-2 synthetic, Adadelta 1.0 CNN)
  double gamma = 0.7;  // StepLR decay for the CNN
  uint64_t seed = 0;
  int threads = 0;  // intra-op threads per rank; 0: cores / ranks on this node

  std::string snapshot_path = "snapshot.pt";  // parse_options: the program's own, see default_snapshot_path
  bool fresh = false;                         // ignore an existing snapshot and start again
  bool deterministic = false;                 // deterministic kernels (GPU): a stopped run resumes bit for bit
  std::string metrics_path;                   // per-epoch CSV, written by rank 0 (empty: none)
  int log_every = 0;                          // progress line every N steps (0: every 30 s)
  std::string init_weights_path;              // a state_dict from Python's torch.save to start from (weights_io.h)
  std::string export_weights_path;            // rank 0 writes the final state_dict here for Python's torch.load
  std::string trace_path;                     // --trace: the ranks' timeline of a few steps, Chrome trace JSON
  int trace_steps = 20;                       // --trace-steps: how many steps it records (after kTraceWarmupSteps)
  int steps = 0;                              // --steps: at most this many steps per epoch (0: all; short runs)
  double sample_temperature = 0;              // --sample-temperature: the GPT's sample at the end, 0: greedy
  // Mixed precision (workload.h): fp32, or bf16/fp16 autocast around the forward and the loss with the
  // parameters and the optimizer state in float32; fp16 also scales the loss (PyTorch's GradScaler).
  // parse_options takes ds_config.json's bf16/fp16 when --precision is not given.
  std::string precision = "fp32";  // fp32 | bf16 | fp16

  // Distributed settings (steps 1-3 and the diagnostics).
  int nproc = 2;                 // step 1: workers to start when there is no GPU
  std::string master_addr;       // empty: from the launcher (not offered with kSpawnOptions)
  int master_port = 0;           // 0: from the launcher; with kSpawnOptions a free port (spawn_master_port)
  std::string init_method;       // file:///shared/path instead of a TCP store
  std::string backend = "auto";  // auto | gloo | nccl
  double bucket_mb = 25;         // gradient bucket size, as PyTorch's bucket_cap_mb
  bool find_unused_parameters = false;
  bool bf16_compress = false;  // DDP's buckets travel as bfloat16 (PyTorch's bf16_compress_hook)
  double rendezvous_timeout_s = 300;
  double collective_timeout_s = 600;
  bool check_collectives = false;  // the collective check (ddp::ProcessGroupOptions::check_collectives)

  // ZeRO (kZeroOptions: step 4; the trainer's zero1/zero2 strategies). parse_options reads the DeepSpeed
  // config and applies its batch size, steps_per_print and bucket size; the optimizer, the warm-up and
  // the clipping are read where they are used (zero_settings.h).
  int zero_stage = 0;                 // 1 or 2 when ZeRO trains (--zero, --strategy, ds_config's stage); 0: no ZeRO
  std::string deepspeed_config_path;  // --deepspeed-config (empty: none)
  DeepSpeedConfig deepspeed;          // that file's settings; without one DeepSpeed's defaults (no optimizer section)

  // Fully sharded data parallel (kFsdpOptions, step 6): FullyShardedOptions and the accumulation.
  bool fully_sharded = false;           // the program offers them (its settings table shows them)
  bool reshard_after_forward = true;    // --reshard-after-forward: free a unit's gathered weights after its forward
  bool checkpoint_activations = false;  // --checkpoint-activations: recompute each unit's forward in backward
  int accumulate = 1;                   // --accumulate: micro-batches per optimizer step (the batch is cut in as many)

  // The trainer (kTrainerOptions, step 5): PyTorch Lightning's Trainer(gpus, num_nodes, strategy).
  std::string strategy;  // single | ddp | zero1 | zero2 (kTrainerOptions; zero<N> with kZeroOptions);
                         // empty: the program's own (steps 0-3)
  int gpus = 0;          // processes per node (--gpus, --devices); 0: as the launcher started them
  int nodes = 0;         // --nodes; 0: as the launcher started them
  bool cuda_graph = false;  // --cuda-graph: each step replayed from one CUDA graph (ddp::CudaGraphStep)

  ProgramId program;  // which program parsed these (its snapshots record it)
};

// Which groups of options a program offers.
enum OptionGroups : unsigned {
  kTrainingOptions = 1u << 0,     // positional epochs/save_every and the training settings
  kDistributedOptions = 1u << 1,  // backend, buckets, timeouts, master address
  kSpawnOptions = 1u << 2,        // --nproc; the workers meet on this node (no --master-addr,
                                  // no --init-method; --master-port defaults to a free port that
                                  // the parent holds for rank 0: see spawn_master_port)
  kZeroOptions = 1u << 3,         // --zero 1|2, --deepspeed-config FILE (step 4)
  kTrainerOptions = 1u << 4,      // step 5: --strategy, Lightning's --gpus/--devices, --nodes, --epochs,
                                  // --deepspeed-config; implies kDistributedOptions; the positional
                                  // epochs/save_every become optional (--epochs; a snapshot every epoch)
  kFsdpOptions = 1u << 5,         // step 6: --reshard-after-forward, --checkpoint-activations, --accumulate
};

// Parses argv into Options. --help prints and exits 0; a bad value prints one line naming the
// option and the fix and exits 2. Also checks what can be checked before any work starts
// (a file can be created next to the snapshot and the metrics file, the device string is
// valid), and applies the per-workload defaults that are not the workload's own (batch size).
// `program` is the calling program (its default snapshot path; its first source line is the
// description --help shows); the default argument reads the caller's own target (program.h).
Options parse_options(int argc, char** argv, unsigned groups, const ProgramId& program = this_program());

// The same with a description of the program's own (the diagnostics, the benchmark, the tests).
Options parse_options(int argc, char** argv, const std::string& description, unsigned groups,
                      const ProgramId& program = this_program());

// The same, plus a program's own options (e.g. the diagnostics' --min-bytes), added to the same
// parser before parsing so that --help lists them and their errors read like the others.
using AddOptions = std::function<void(CLI::App& app, Options& options)>;
Options parse_options(int argc, char** argv, const std::string& description, unsigned groups,
                      const AddOptions& add_options, const ProgramId& program = this_program());

// The program's own snapshot file, so that runs of different programs in one folder (step 2's
// exercise and its solution, step 1 and step 2) never meet: "snapshot-step2-exercise.pt",
// "snapshot-step2-solution.pt", "snapshot-step0.pt"; "snapshot.pt" outside a program target.
std::string default_snapshot_path(const ProgramId& program);

// Has the library's messages name its settings by this command line's flags ("--collective-timeout",
// not ProcessGroupOptions::collective_timeout; ddp/setting_names.h). parse_options and run_main call
// it first, so every program's learners read the flags they can type.
void name_library_settings();

// --master-addr, --master-port and --init-method, for resolve_launch_env.
ddp::LaunchOverrides launch_overrides(const Options& options);

}  // namespace ddpw
