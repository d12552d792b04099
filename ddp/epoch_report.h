// defines: EpochReporter — the end of every epoch: the ranks' training loss summed, the slowest
//          rank's time and the longest data-loading time, the test set evaluated over all ranks'
//          shards, one line printed by rank 0 and one metrics row written.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "ddp/metrics.h"
#include "ddp/options.h"
#include "ddp/workload.h"

namespace ddp {

class ProcessGroup;

class EpochReporter {
 public:
  // pg may be null (one process). Only global rank 0 prints and writes the metrics file.
  EpochReporter(const Options& options, const Workload& workload, torch::Device device, ProcessGroup* pg,
                int global_rank, int world_size, int local_world_size, int threads);

  // loss_sum: sum of this rank's batch losses; samples: samples this rank trained on; seconds:
  // this rank's epoch time; data_seconds: its share of that spent producing batches
  // (Loader::take_load_seconds). Both are reported as their maximum over the ranks: the slowest
  // rank sets the pace.
  void end_epoch(int64_t epoch, double loss_sum, int64_t batches, int64_t samples, double seconds,
                 double data_seconds, Model& model);

  // Every rank prints a checksum of its final weights (equal on all ranks when DDP kept them in
  // sync) and the ranks compare theirs with rank 0's: a mismatch is an error. Then, with
  // --export-weights, rank 0 writes the model's state_dict for Python (weights_io.h).
  void end_training(Model& model, const std::string& tag);

 private:
  const Options& options_;
  const Workload& workload_;
  torch::Device device_;
  ProcessGroup* pg_;
  int global_rank_, world_size_, local_world_size_, threads_;
  std::unique_ptr<MetricsWriter> metrics_;  // rank 0 with --metrics only
};

}  // namespace ddp
