// defines: FsdpUnit — one unit of FullyShardedDataParallel (fully_sharded.h) and its three moves, as
//          FSDP2's FSDPParamGroup: gather (the ranks' shards all-gathered into the flat buffer the
//          module's parameters view), reshard (the buffer's memory freed; the views stay), reduce
//          (the full gradients reduce-scattered into the shard's .grad, the input freed when it lands).
//          Under no_sync the full gradients are summed in the reduce dtype (FSDP2 upcasts them too).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/detail/flat_buckets.h"  // defines: BucketPlan
#include "ddp/detail/gradient_hooks.h"
#include "ddp/detail/sharded_collectives.h"  // defines: ReduceScatter
#include "ddp/module_call.h"                 // defines: CallInterception
#include "ddp/process_group.h"

namespace ddp {

// One unit's layout (the same on every rank).
struct FullyShardedUnit {
  std::string name;                      // the unit's path in the root ("blocks.0"), "" for the root unit
  std::vector<std::string> param_names;  // full names in the root ("blocks.0.fc.weight"), in flat order
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0;         // parameters in the unit
  int64_t padded_numel = 0;  // numel rounded up to a multiple of the world size
  int64_t shard_numel = 0;   // padded_numel / world size
};

namespace detail {

// Where the unit's parameters are.
enum class Gathered { kNo, kInFlight, kYes };
// This backward pass's gradients.
enum class Reduced { kNo, kInFlight, kDone };

struct FsdpDtypes {
  torch::Dtype compute = torch::kFloat32;  // of the gathered parameters (param_dtype)
  torch::Dtype reduce = torch::kFloat32;   // of the reduce-scatter and of no_sync's sums
};

class FsdpUnit {
 public:
  FullyShardedUnit layout;
  torch::nn::Module* module = nullptr;  // null: the root unit
  std::vector<torch::Tensor> params;    // the module's parameters (views of `full`)
  BucketPlan plan;                      // each parameter's place in the flat buffer (flat_buckets.h)
  torch::Tensor shard;                  // [shard_numel], float32 leaf: what the optimizer steps on
  torch::Tensor full;                   // [padded_numel], compute dtype; its storage freed when resharded
  torch::Tensor anchor;                 // checkpointing: an input that needs grad, so the unit's backward runs
  size_t grads_pending = 0;             // gradients of this pass not ready yet
  std::unique_ptr<GradientHooks> hooks;
  CallInterception interception;

  Gathered gathered() const { return gathered_; }
  Reduced reduced() const { return reduced_; }
  std::string label() const { return layout.name.empty() ? std::string("the root unit") : "unit " + layout.name; }

  // The flat buffer the parameters become views of (their own memory goes), freed until a gather.
  void make_buffer(const torch::Device& device, const FsdpDtypes& dtypes);
  // The all-gather, asynchronous; finish_gather waits for it (at world size 1 a copy).
  void start_gather(ProcessGroup& pg, const FsdpDtypes& dtypes);
  void finish_gather(ProcessGroup& pg);
  void gather(ProcessGroup& pg, const FsdpDtypes& dtypes) { start_gather(pg, dtypes), finish_gather(pg); }
  // The gathered parameters' memory freed (a gather in flight lands first).
  void reshard(ProcessGroup& pg);

  // no_sync: the parameters' .grad summed into the unit's full gradient (reduce dtype) and dropped.
  void accumulate_gradients(const FsdpDtypes& dtypes);
  // The pass's full gradients (plus what no_sync summed), averaged over the ranks, reduce-scattered:
  // started here, landed into shard.grad by finish_reduce, which frees the input.
  void start_reduce(ProcessGroup& pg, const FsdpDtypes& dtypes);
  void finish_reduce();
  // The next pass: its gradients pending again.
  void begin_pass();
  void drop_gradients(bool set_to_none);  // zero_grad: shard.grad, .grad and no_sync's sums

  int64_t gathered_bytes() const;
  int64_t full_gradient_bytes() const;  // .grad of the parameters and no_sync's sums
  bool holds_reduce_input() const { return reduce_input_.defined(); }

 private:
  Gathered gathered_ = Gathered::kNo;
  Reduced reduced_ = Reduced::kNo;
  c10::intrusive_ptr<c10d::Work> gather_work_;
  torch::Tensor gather_input_;
  torch::Tensor accumulated_;  // no_sync: [padded_numel], reduce dtype
  torch::Tensor reduce_input_, reduce_output_;
  ReduceScatter reduce_;
};

}  // namespace detail
}  // namespace ddp
