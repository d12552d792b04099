// defines: save_snapshot / load_snapshot — everything a run needs to continue exactly (model,
//          optimizer, epoch and step, sampler seed, RNG state), written atomically (temp file,
//          fsync, rename) with a checksum and the model's parameter shapes, so a truncated,
//          corrupted or foreign file is refused with a message instead of loading silently.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ddp {

struct TrainingState {
  int64_t epochs_run = 0;     // completed epochs
  int64_t step_in_epoch = 0;  // steps done in epoch `epochs_run` (a snapshot taken mid-epoch)
  uint64_t seed = 0;          // the sampler's seed: with the epoch it fixes the data order
  int64_t world_size = 1;     // informational: the order depends on it
};

// Writes `path` atomically (readable by the user only). The previous file survives a crash.
void save_snapshot(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                   const TrainingState& state);

// nullopt when `path` does not exist. Throws ddp::Error naming the file when it is truncated,
// corrupt or from a model of another shape; the file is left as it is. A snapshot taken mid-epoch
// by another number of ranks resumes at the start of that epoch (the shards differ), with a warning.
std::optional<TrainingState> load_snapshot(const std::string& path, torch::nn::Module& model,
                                           torch::optim::Optimizer& optimizer, int64_t world_size);

// Loads only the model's weights (e.g. into a plain, unwrapped model for evaluation).
void load_model_weights(const std::string& path, torch::nn::Module& model);

}  // namespace ddp
