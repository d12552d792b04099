// defines: save_snapshot / load_snapshot — everything a run needs to continue exactly (model,
//          optimizer, epoch and step, sampler seed, RNG state), written atomically (temp file,
//          fsync, rename) with a checksum, the model's parameter shapes and the identity of the
//          program that wrote it (step, exercise or solution, dataset), so that a truncated,
//          corrupted or foreign file — another model's, another program's — is refused with a
//          message instead of loading silently.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "ddp/options.h"

namespace ddp {

struct TrainingState {
  int64_t epochs_run = 0;     // completed epochs
  int64_t step_in_epoch = 0;  // steps done in epoch `epochs_run` (a snapshot taken mid-epoch)
  int64_t world_size = 1;     // the ranks that trained: the data order depends on it
};

// Writes options.snapshot_path atomically (readable by the user only), with options.seed (with
// the epoch it fixes the data order) and who wrote it (options.program, options.dataset). The
// previous file survives a crash.
void save_snapshot(const Options& options, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                   const TrainingState& state);

// nullopt with --fresh (options.fresh) or when options.snapshot_path does not exist. Throws ddp::Error naming the file
// when it is truncated, corrupt, written by another program (another step, the exercise for the solution, another
// dataset) or by a model of another shape; the file is left as it is. A snapshot taken mid-epoch by another number of
// ranks resumes at the start of that epoch (the shards differ), with a warning.
std::optional<TrainingState> load_snapshot(const Options& options, torch::nn::Module& model,
                                           torch::optim::Optimizer& optimizer, int64_t world_size);

// "step4_sharded (exercise) training synthetic": who wrote the plain snapshot at `path`; "" when
// it is not a readable plain snapshot (e.g. a sharded snapshot's manifest there instead).
std::string snapshot_writer(const std::string& path);

// Loads only the model's weights (e.g. into a plain, unwrapped model for evaluation), whichever
// program wrote them.
void load_model_weights(const std::string& path, torch::nn::Module& model);

}  // namespace ddp
