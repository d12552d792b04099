// defines: EpochReporter and EpochLog — an epoch's bookkeeping, so that a step's run_epoch holds
//          only the training: the "Epoch N | Batchsize | Steps" line, the running loss (kept on the
//          device, read only when a line is printed), progress lines for batch logs, the epoch's
//          time and data-loading time; at the end the ranks' training loss summed, the slowest
//          rank's time, the test set evaluated over all ranks' shards, one line printed by rank 0
//          and one metrics row; after training, the replicas' weights compared.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "course/metrics.h"
#include "course/options.h"
#include "course/step_trace.h"
#include "course/workload.h"
#include "ddp/data.h"
#include "ddp/launch_env.h"
#include "ddp/weights_io.h"  // defines: TensorDict (a state_dict as Python saves it)

namespace ddp {
class ProcessGroup;
}  // namespace ddp

namespace ddpw {

// One epoch of one rank, from EpochReporter::begin_epoch to end_epoch.
class EpochLog {
 public:
  // After each step: adds the batch's loss (a device tensor, detached here) and its samples.
  // Nothing waits for the device, unless a progress line is due.
  void add(const ddp::Batch& batch, const torch::Tensor& loss);
  // Called before each read of the losses on the host (--cuda-graph: the replays' timed wait).
  void before_reads(std::function<void()> f) { before_read_ = std::move(f); }

 private:
  friend class EpochReporter;
  EpochLog(int64_t epoch, int64_t first_step, ddp::Loader& loader, const std::string& tag, int64_t log_every,
           StepTrace* trace);
  double mean_loss() const;  // reads the device

  int64_t epoch_, step_;  // step: steps of this epoch done so far (a resumed epoch starts past 0)
  ddp::Loader* loader_;
  torch::Tensor loss_sum_;  // float64, on the loss's device
  int64_t batches_ = 0, samples_ = 0;
  Progress progress_;
  std::chrono::steady_clock::time_point start_;
  StepTrace* trace_;  // --trace, else null
  std::function<void()> before_read_;
};

class EpochReporter {
 public:
  // pg may be null (one process). Only global rank 0 prints the epoch line and writes the
  // metrics file (--metrics). The threads per rank are the ones set by now (configure_compute).
  EpochReporter(const Options& options, const ddp::LaunchEnv& launch, torch::Device device, const Workload& workload,
                ddp::ProcessGroup* pg);

  // "[GPU0]" ("[CPU1]"), or "[RANK 3: local GPU 1]" when the ranks span several nodes, where
  // local ranks repeat: the prefix of every line this rank prints.
  const std::string& tag() const { return tag_; }

  // One line of this rank's, after its tag: print("Stopping at epoch {}", epoch).
  template <typename... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    fmt::print("{} {}\n", tag_, fmt::format(format, std::forward<Args>(args)...));
  }
  // The same, printed by global rank 0 only: what the ranks did together (e.g. a sharded snapshot).
  template <typename... Args>
  void announce(fmt::format_string<Args...> format, Args&&... args) const {
    if (launch_.global_rank == 0) print(format, std::forward<Args>(args)...);
  }

  // Prints "<tag> Epoch N | Batchsize: B | Steps: S" and starts timing. `first_step`: where a
  // resumed epoch continues. With --steps N it first limits `loader` to N steps per epoch
  // (Loader::limit_steps), so the program's loop over loader.steps() ends there.
  EpochLog begin_epoch(int64_t epoch, ddp::Loader& loader, int64_t first_step);

  // Sums the loss over the ranks, takes the slowest rank's epoch and data-loading time,
  // evaluates on the test set (all ranks' shards) and prints one line on rank 0.
  void end_epoch(EpochLog& log, Model& model);

  // With --trace, first every rank's timeline goes into one file (rank 0 writes it). Every rank
  // prints its peak memory (peak_memory.h) and a checksum of its final weights (equal on all ranks
  // when DDP kept them in sync), and the ranks compare theirs with rank 0's: a mismatch is an error.
  // Then, with --export-weights, rank 0 writes the model's state_dict for Python (weights_io.h).
  // Last, for the GPT, rank 0 prints a few lines it writes ("Sample: ...", gpt_sample.h;
  // --sample-temperature), alone: a model that holds no weights (ShardedView) is not sampled.
  void end_training(Model& model);
  // The same for a model no rank holds whole (FSDP): `gathered` is its full state_dict on rank 0
  // (empty on the others, as FullyShardedDataParallel::full_state_dict gives it). Every rank prints
  // its peak memory; rank 0 loads the weights into a fresh copy of the workload's model
  // (ddp::load_state_dict), prints its checksum, exports it and samples it on its device; there are
  // no replicas to compare.
  void end_training(const ddp::TensorDict& gathered);

 private:
  const Options& options_;
  const ddp::LaunchEnv launch_;
  torch::Device device_;
  const Workload& workload_;
  ddp::ProcessGroup* pg_;
  int threads_;
  std::string tag_;
  std::unique_ptr<MetricsWriter> metrics_;  // rank 0 with --metrics only, opened at the first row
  std::unique_ptr<StepTrace> trace_;        // --trace only

  void write_trace();       // --trace: every rank's timeline into one file (all ranks take part)
  void print_peak_memory() const;
  void print_sample(Model& model) const;  // rank 0, the GPT only
};

}  // namespace ddpw
