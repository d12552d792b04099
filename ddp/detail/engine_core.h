// defines: EngineCore — what the bucketed data-parallel engines share (DistributedDataParallel's
//          GradientReducer, ZeroDataParallel's ZeroReducer): the trainable parameters and their names,
//          the model check and rank 0's weights to every rank, the bucket plan and each bucket's flat
//          gradient buffer, gradients put into their buckets (divided by the world size on the way),
//          .grad pointed at bucket slices, the BucketSchedule with its hooks, and a timeline record for
//          every bucket's collective. BucketStrategy — what an engine adds to it: what happens when a
//          bucket is ready (launch) and at the end of backward (finish), and the layout (DDP:
//          allreduce of the bucket as it is; ZeRO: reduce-scatter, the bucket padded to a multiple of
//          the world size). broadcast_coalesced — one rank's tensors to every rank, flattened into one
//          broadcast per dtype and device (PyTorch's _broadcast_coalesced).
//          broadcast_model_from_rank0 — the model check and rank 0's weights to every rank, for
//          the core and for FSDP.
// FullyShardedDataParallel (fully_sharded.h), the third engine, takes from here the model check and
// rank 0's weights (broadcast_model_from_rank0, over all of its parameters before it shards them)
// and the flat layout (flat_buckets.h: plan_flat and padded_numel, a unit laid out as a bucket and
// padded to the world size); its collectives reach the same timeline (record_collective, as
// record() does for a bucket). It keeps its own units, not buckets: a unit is a flat buffer of
// parameters (not gradients) in registration order, gathered before its forward and freed after
// it, with prefetch; its gradients
// are copied into a fresh flat buffer in the reduce dtype when the unit's last one is ready, then
// divided and reduce-scattered (a cast the core's put() does not do), and the full gradients are
// freed, so there are no persistent .grad views and no BucketSchedule (its hooks count per unit).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/detail/bucket_schedule.h"  // defines: BucketSchedule
#include "ddp/detail/flat_buckets.h"     // defines: BucketPlan, plan_buckets, storage_slice
#include "ddp/process_group.h"

namespace ddp {

// Rank `root`'s values of `tensors` to every rank, in place: the tensors flattened into one buffer per
// dtype and device (at most ~250 MiB each, as PyTorch's), one broadcast each, all started, then waited
// in order (`what` names them in an error). Every rank calls it with the same shapes in the same order.
void broadcast_coalesced(const std::vector<torch::Tensor>& tensors, int root, ProcessGroup& pg,
                         const std::string& what);

// Collective: every rank holds the same model (`names` and the shapes of `params`, checked against
// rank 0's: a ddp::Error naming the fix otherwise), then rank 0's `params` and `buffers` to every
// rank (broadcast_coalesced).
void broadcast_model_from_rank0(const std::vector<std::string>& names, const std::vector<torch::Tensor>& params,
                                const std::vector<torch::Tensor>& buffers, ProcessGroup& pg);

// One bucket of the plan: the parameters it holds, its flat gradient buffer and its collective.
struct FlatBucket {
  BucketPlan plan;                      // parameters (indices into the core's), their offsets, numel
  int64_t padded_numel = 0;             // plan.numel rounded up to the layout's multiple (zeros at the end)
  torch::Tensor grads;                  // [padded_numel]: the bucket's gradients (kept, or only while it fills)
  std::vector<torch::Tensor> slices;    // kept buffers: each parameter's part of grads (1-D), made once
  torch::Tensor world_size;             // 0-dim (CPU, the bucket's dtype): gradients enter divided by it
  std::vector<size_t> undivided;        // slots put in place (or zeroed) this pass: divided when it is sent
  std::string label;                    // "(bucket 1 of 3)": names the bucket's collective in errors
  c10::intrusive_ptr<c10d::Work> work;  // its allreduce while it runs (none at world size 1)
};

// What an engine does with the core's buckets during a synced backward pass (all inside backward()).
class BucketStrategy {
 public:
  // How the buckets are laid out: their sizes and whether their gradient buffers are kept.
  struct Layout {
    std::string engine;          // names the engine in errors: "DistributedDataParallel"
    std::string unused_hint;     // the fix when a parameter got no gradient in a pass
    bool fill_missing = false;   // find_unused_parameters: a parameter without a gradient counts as zero
    double bucket_mb = 25;       // PyTorch's bucket_cap_mb
    int64_t pad_to = 1;          // each bucket holds a multiple of this many elements (ZeRO: the world size)
    bool keep_gradients = true;  // false: a bucket's buffer is made when it starts to fill, and
                                 // .grad is released once it is in its bucket (ZeRO stage 2)
  };
  virtual ~BucketStrategy() = default;
  virtual void start() {}                    // a synced pass begins, before any gradient goes in
  virtual void before_new_buffer(size_t) {}  // !keep_gradients: bucket k's buffer is about to be made
  virtual void launch(size_t bucket) = 0;    // the bucket is complete and its turn has come: send it
  // The pass was abandoned (interrupted) or misses gradients: wait for buckets [0, sent).
  virtual void wait_for_sent(size_t sent, bool interrupted) = 0;
  virtual void finish() = 0;  // every bucket was sent: wait for them and deliver the gradients
};

class EngineCore {
 public:
  // The module's parameters that require a gradient, named as the module names them (`engine`
  // names the engine in errors: "DistributedDataParallel").
  EngineCore(const std::shared_ptr<torch::nn::Module>& module, std::shared_ptr<ProcessGroup> pg,
             const std::string& engine);
  // Leaf tensors that require a gradient, each once (checked; `engine` names the list's owner in errors).
  EngineCore(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> pg, const std::string& engine);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Collective: broadcast_model_from_rank0 of the core's parameters and `buffers`.
  void broadcast_from_rank0(const std::vector<torch::Tensor>& buffers);
  // The buckets (PyTorch's order and sizes, plan_buckets) and the schedule that drives `strategy`,
  // which must outlive the core. Once, after broadcast_from_rank0.
  void make_buckets(const BucketStrategy::Layout& layout, BucketStrategy& strategy);

  ProcessGroup& process_group() const { return *pg_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  std::vector<FlatBucket>& buckets() { return buckets_; }
  const std::vector<FlatBucket>& buckets() const { return buckets_; }
  BucketSchedule& schedule() { return *schedule_; }  // no_sync() and the backward pass's state

  // Bucket k's sum over the ranks, started (bucket.work; none at world size 1), with its timeline record.
  void allreduce(size_t bucket);
  // A timeline record (timeline.h) of bucket k's collective `work`, named `what`.
  void record(size_t bucket, const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const;
  // Waits for bucket k's allreduce, if one runs (`what` names it in an error).
  void wait(size_t bucket, const std::string& what);
  // Bucket k's parameters' .grad become their slices of its buffer (no copy back), except those
  // marked in `keep_undefined` (indexed by parameter; empty: none).
  void point_grads_at(size_t bucket, const std::vector<char>& keep_undefined = {});

 private:
  void put(size_t param, size_t bucket, size_t slot);
  void divide(size_t bucket);  // the slots put() left undivided: the whole bucket at once when all are

  std::shared_ptr<ProcessGroup> pg_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<FlatBucket> buckets_;
  BucketStrategy* strategy_ = nullptr;
  bool keep_gradients_ = true;
  // Last: destroyed first, so no hook runs on a half-gone core.
  std::unique_ptr<BucketSchedule> schedule_;
};

}  // namespace ddp
