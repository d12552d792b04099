// defines: save_snapshot / load_snapshot — everything a run needs to continue exactly (model,
//          optimizer, epoch and step, sampler seed, RNG state), written atomically (temp file,
//          fsync, rename) with a checksum, the model's parameter shapes and who wrote it
//          (SnapshotOwner: the writer's label, the dataset), so that a truncated, corrupted or
//          foreign file — another model's, another program's — is refused with a message instead
//          of loading silently; TrainingState, SnapshotOwner.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ddp {

struct TrainingState {
  int64_t epochs_run = 0;     // completed epochs
  int64_t step_in_epoch = 0;  // steps done in epoch `epochs_run` (a snapshot taken mid-epoch)
  int64_t world_size = 1;     // the ranks that trained: the data order depends on it
};

// Who wrote a snapshot. Recorded in it; a load that expects another owner refuses the file, naming
// both ("trainer (v2) training synthetic"), since another program's snapshot of the same model
// would load and resume the wrong run.
struct SnapshotOwner {
  std::string writer;   // an opaque label the caller chooses, e.g. the executable's name ("": none)
  std::string dataset;  // what it trains on: models of equal shapes trained on different data differ
  // "writer training dataset", the form the messages use; "this program" for no writer.
  std::string label() const;
  bool operator==(const SnapshotOwner&) const = default;
};

// Writes `path` atomically (readable by the user only): the model's parameters and buffers, the
// optimizer's state, `state`, `seed` (with the epoch it fixes the data order), the RNG states and
// `owner` (none: empty fields). The previous file survives a crash; the folder must exist.
void save_snapshot(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                   const TrainingState& state, const std::optional<SnapshotOwner>& owner = {}, uint64_t seed = 0);

// nullopt when `path` does not exist. Throws ddp::Error naming the file when it is truncated,
// corrupt, written by another owner than `owner` (when one is given) or by a model of another
// shape; the file is left as it is. A snapshot taken mid-epoch by another number of ranks
// than `world_size` resumes at the start of that epoch (the shards differ), with a warning.
std::optional<TrainingState> load_snapshot(const std::string& path, torch::nn::Module& model,
                                           torch::optim::Optimizer& optimizer, int64_t world_size,
                                           const std::optional<SnapshotOwner>& owner = {});

// "trainer (v2) training synthetic": who wrote the plain snapshot at `path` (its
// owner's label); "" when it is not a readable plain snapshot (e.g. a sharded snapshot's manifest
// there instead) or records no owner.
std::string snapshot_writer(const std::string& path);

// Loads only the model's weights (e.g. into a plain, unwrapped model for evaluation), whichever
// program wrote them.
void load_model_weights(const std::string& path, torch::nn::Module& model);

namespace detail {
// The writer recorded by a file written before SnapshotOwner::writer, which held a name and its
// variant apart: "name (variant)", or "name" for no variant or "program".
std::string legacy_writer(const std::string& name, const std::string& variant);
// A sharded snapshot's owner as its manifest records it: the "program" entry, as JSON text
// ({"writer", "dataset"}; before the writer's label {"name", "kind", "step", "dataset"}), and back.
std::string owner_to_manifest_entry(const SnapshotOwner& owner);
SnapshotOwner owner_from_manifest_entry(const std::string& json);
}  // namespace detail

}  // namespace ddp
