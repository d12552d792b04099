// The course's side of step 6: the command line into FullyShardedOptions, snapshots, memory, a view.
#include "course/fully_sharded.h"

#include <fmt/format.h>

#include "course/from_options.h"

namespace ddpw {

namespace {
int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }
}  // namespace

ddp::FullyShardedOptions fsdp_options(const Options& o, const torch::Device& device) {
  ddp::FullyShardedOptions f;
  f.device = device;
  f.reshard_after_forward = o.reshard_after_forward;
  f.checkpoint_activations = o.checkpoint_activations;
  return f;
}

KeptBytes kept_bytes(FullyShardedModel& model, const ddp::FullyShardedAdamW& optimizer) {
  KeptBytes kept;
  const auto& engine = *model.engine();
  for (const auto& shard : engine.parameters()) {
    kept.parameters += bytes_of(shard);
    kept.gradients += bytes_of(shard.grad());
  }
  kept.parameters += engine.gathered_bytes();
  kept.gradients += engine.full_gradient_bytes();
  kept.optimizer_state = optimizer.state_bytes();
  const int world = model.engine()->process_group().size();
  kept.how = fmt::format("FSDP over {} rank{}, {} units", world, world == 1 ? "" : "s", engine.units().size());
  return kept;
}

void ShardedView::train(bool on) {
  Model::train(on);
  model_->train(on);
}

}  // namespace ddpw
