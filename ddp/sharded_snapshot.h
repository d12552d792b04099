// defines: save_sharded_snapshot / load_sharded_snapshot — the snapshots of sharded training (ZeRO's
//          ZeroDataParallel, FSDP's FullyShardedDataParallel: any ShardedState, sharded_state.h, with
//          its ShardedAdamW), where no rank holds the whole optimizer state (FSDP: nor the model).
//   * Each rank writes its shard: its slice of every flat group (ZeRO's buckets, FSDP's units) of
//     the parameters and of Adam's moments,
//     and its RNG state (rank 0 also the module's buffers), as a checked file (atomic, CRC-32).
//   * Rank 0 then writes the manifest at `path` (JSON, readable): the training state, the step
//     count, the model's parameters, the bucket layout, and every shard with its size and CRC-32;
//     with a GradScaler attached to the optimizer also its scale and growth tracker and Adam's count
//     of applied steps, so that a mixed-precision run resumes exactly.
//     Shards carry a generation number in their names and the manifest is replaced last: a crash
//     at any moment leaves the previous snapshot whole (its shards go only after the new manifest).
//   * Resuming with the same world size and groups, a rank reads only its own shard: exact. With
//     another world size (or bucket size) every rank reads all shards into host memory, reassembles
//     the full state there and takes its new slices (the device only ever holds a rank's slices).
//     A snapshot taken mid-epoch then resumes at the start of that epoch (the data shards differ).
//   * A missing, truncated, corrupt or foreign shard (one another save wrote) is refused on every
//     rank with a message that names it; nothing is changed then.
//   * Given an owner (SnapshotOwner, snapshot.h), the manifest records who wrote it, as a plain
//     snapshot does: a load that expects another owner refuses it, naming both.
// The folder of `path` must be shared by all ranks (as for the plain snapshot).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "ddp/sharded_adamw.h"
#include "ddp/snapshot.h"  // TrainingState, SnapshotOwner

namespace ddp {

// All ranks call it (collective). Throws ddp::Error on every rank if any rank could not write.
// `owner`, when given, is recorded in the manifest.
void save_sharded_snapshot(const std::string& path, ShardedAdamW& optimizer, const TrainingState& state,
                           const std::optional<SnapshotOwner>& owner = {});

// nullopt on every rank when `path` does not exist. All ranks call it (collective). A snapshot
// taken mid-epoch by another number of ranks resumes at the start of that epoch (the data shards
// differ), with a warning, as load_snapshot. With `owner`: a snapshot another owner wrote (or one
// that recorded none) is refused on every rank with a message naming both and the fix; nothing is
// changed then.
std::optional<TrainingState> load_sharded_snapshot(const std::string& path, ShardedAdamW& optimizer,
                                                   const std::optional<SnapshotOwner>& owner = {});

// "trainer (v2) training synthetic": who wrote the sharded snapshot whose manifest is
// `path`; "" when it is not a readable manifest or records no writer.
std::string sharded_snapshot_writer(const std::string& path);

// Only the weights (and buffers), reassembled from all shards into a plain module (evaluation,
// or training on without ZeRO or FSDP), matched by name. No process group needed.
void load_sharded_model_weights(const std::string& path, torch::nn::Module& model);

}  // namespace ddp
