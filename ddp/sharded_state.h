// defines: ShardedState — the seam between an engine that shards a model's training state
//          (ZeroReducer: ZeRO stages 1 and 2; FullyShardedEngine: FSDP, ZeRO stage 3) and what works on
//          the shards whatever the engine: ShardedAdamW (sharded_adamw.h) and the sharded snapshots
//          (sharded_snapshot.h). One optimizer and one snapshot format for both.
//   * The trainable parameters lie in flat groups (ZeRO's buckets, FSDP's units), each padded with
//     zeros to a multiple of the world size; rank r owns slice r of every group: the parameters'
//     slice (float32, what the optimizer updates), the averaged gradients' slice, Adam's moments.
//   * After the optimizer changed the slices (or a snapshot wrote them), parameter_shards_changed()
//     lets the engine do what it must: ZeRO all-gathers the slices (every rank holds the whole model
//     again); FSDP does nothing (its next forward gathers them).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/process_group.h"

namespace ddp {

// One flat group: which parameters (indices into sharded_parameters()) and where each begins.
struct ShardedGroup {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;
  int64_t numel = 0;         // the parameters' elements
  int64_t padded_numel = 0;  // numel rounded up to a multiple of the world size
};

// A trainable parameter as the shards know it: its name in the module, shape and dtype.
struct ShardedParameter {
  std::string name;
  std::vector<int64_t> shape;
  torch::Dtype dtype = torch::kFloat32;
};

class ShardedState {
 public:
  virtual ~ShardedState() = default;

  // "ZeRO stage 2", "FSDP": for messages and the snapshot's manifest; the ZeRO stage (FSDP: 3).
  virtual std::string sharded_engine() const = 0;
  virtual int zero_stage() const = 0;
  virtual ProcessGroup& process_group() = 0;
  virtual torch::nn::Module& module() = 0;  // its buffers: rank 0's go into a snapshot

  virtual std::vector<ShardedParameter> sharded_parameters() const = 0;
  virtual std::vector<ShardedGroup> sharded_groups() const = 0;

  // This rank's slice of every group (padded_numel / world size elements each), in place: what
  // the optimizer updates, and what a snapshot reads and writes.
  virtual std::vector<torch::Tensor> parameter_shards() = 0;
  // The averaged gradients' slices; an undefined tensor for a group that got no gradient in this
  // step (an FSDP unit the forward did not use: the optimizer skips it, as torch.optim does).
  virtual std::vector<torch::Tensor> gradient_shards() = 0;
  // True after a synchronized backward since the last clear_gradients().
  virtual bool has_gradients() const = 0;
  virtual void clear_gradients(bool set_to_none) = 0;
  // The slices were changed (an optimizer step, a snapshot loaded). Collective.
  virtual void parameter_shards_changed() = 0;

  // The optimizer steps on groups of about this many bytes (its temporaries stay that size).
  virtual int64_t step_group_bytes() const { return int64_t{25} << 20; }
};

}  // namespace ddp
