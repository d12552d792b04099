// defines: save_sharded_snapshot / load_sharded_snapshot — the snapshots of ZeRO training, where no
//          rank holds the whole optimizer state.
//   * Each rank writes its shard: its slice of every bucket of the parameters and of Adam's moments,
//     and its RNG state (rank 0 also the module's buffers), as a checked file (atomic, CRC-32).
//   * Rank 0 then writes the manifest at `path` (JSON, readable): the training state, the step
//     count, the model's parameters, the bucket layout, and every shard with its size and CRC-32.
//     Shards carry a generation number in their names and the manifest is replaced last: a crash
//     at any moment leaves the previous snapshot whole (its shards go only after the new manifest).
//   * Resuming with the same world size and buckets, a rank reads only its own shard and the
//     parameters are all-gathered: exact. With another world size (or bucket size) every rank reads
//     all shards, reassembles the full state and takes its new slice.
//   * A missing, truncated, corrupt or foreign shard (one another save wrote) is refused on every
//     rank with a message that names it; nothing is changed then.
//   * A program's snapshot (the Options overloads) records in the manifest who wrote it (step,
//     exercise or solution, dataset), as a plain snapshot does: another program refuses it, naming both.
// The folder of `path` must be shared by all ranks (as for the plain snapshot).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "ddp/options.h"
#include "ddp/sharded_adamw.h"
#include "ddp/snapshot.h"  // TrainingState
#include "ddp/zero_data_parallel.h"

namespace ddp {

// All ranks call it (collective). Throws ddp::Error on every rank if any rank could not write.
void save_sharded_snapshot(const std::string& path, ShardedAdamW& optimizer, const TrainingState& state);
// A program's: at options.snapshot_path, with options.program and options.dataset in the manifest.
void save_sharded_snapshot(const Options& options, ShardedAdamW& optimizer, const TrainingState& state);

// nullopt on every rank when `path` does not exist. All ranks call it (collective). A snapshot
// taken mid-epoch by another number of ranks resumes at the start of that epoch (the data shards
// differ), with a warning, as load_snapshot.
std::optional<TrainingState> load_sharded_snapshot(const std::string& path, ShardedAdamW& optimizer);
// A program's: options.snapshot_path; nullopt with --fresh (options.fresh). A snapshot another
// program wrote (another step, the exercise for the solution, another dataset, or none recorded) is
// refused on every rank with a message naming both and the fix; nothing is changed then.
std::optional<TrainingState> load_sharded_snapshot(const Options& options, ShardedAdamW& optimizer);

// "step4_sharded (solution) training synthetic": who wrote the sharded snapshot whose manifest is
// `path`; "" when it is not a readable manifest or records no writer.
std::string sharded_snapshot_writer(const std::string& path);

// Only the weights (and buffers), reassembled from all shards into a plain module (evaluation,
// or training on after ZeRO without it). No process group needed.
void load_sharded_model_weights(const std::string& path, torch::nn::Module& model);

}  // namespace ddp
