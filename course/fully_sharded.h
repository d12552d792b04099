// defines: the course's side of fully sharded data parallel (step 6): FullyShardedModel, fsdp_options
//          (the command line's sharding and checkpointing; the snapshots are ZeRO's, from_options.h),
//          kept_bytes (what a rank keeps between steps) and ShardedView (the wrapper seen as a Model,
//          so that evaluation runs through it: no rank holds the whole model to evaluate with).
#pragma once

#include <torch/torch.h>

#include <optional>

#include "course/kept_memory.h"
#include "course/models.h"
#include "course/options.h"
#include "ddp/fully_sharded.h"

namespace ddpw {

using FullyShardedModel = ddp::FullyShardedDataParallel<Model>;

// --reshard-after-forward and --checkpoint-activations (kFsdpOptions), and the device the shards go to
// (the model is built on the host). --precision stays autocast around the model's forward (models.h);
// the shards and the reduce-scatter stay float32.
ddp::FullyShardedOptions fsdp_options(const Options& options, const torch::Device& device);

// This rank's shards and their gradients, what is still gathered (parameters kept after forward,
// gradients accumulated under no_sync) and the optimizer's moments.
KeptBytes kept_bytes(FullyShardedModel& model, const ddp::FullyShardedAdamW& optimizer);

// The wrapper as a Model: forward() runs the wrapper's (every rank must call it as often: each
// call gathers the units), train()/eval() reach the module inside. It holds no parameters: the
// final checksum and --export-weights take the gathered weights (EpochReporter::end_training with
// the wrapper's full_state_dict()).
class ShardedView : public Model {
 public:
  explicit ShardedView(FullyShardedModel& model) : model_(model) {}
  void train(bool on = true) override;

 protected:
  torch::Tensor compute(const torch::Tensor& x) override { return model_.forward(x); }

 private:
  FullyShardedModel& model_;
};

}  // namespace ddpw
