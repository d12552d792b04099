// defines: DistributedDataParallel — PyTorch's DDP for any torch::nn::Module, in C++.
//   * At construction, parameters and buffers are broadcast from rank 0 (ranks may start apart).
//   * During backward, each parameter's gradient accumulator fires a hook once .grad is final;
//     when a bucket (~bucket_mb; the first 1 MiB, as PyTorch) is complete its allreduce starts at
//     once, in bucket order, so communication overlaps the rest of backward. A callback at the
//     end of backward waits for all buckets and points each .grad at its averaged slice of the
//     bucket (PyTorch's gradient_as_bucket_view: no copy back) before backward() returns.
//     At world size 1 the allreduce (the identity) is not sent; everything else runs as usual.
//   * bf16_compress: each bucket is sent as bfloat16 and summed in bfloat16 (PyTorch's
//     bf16_compress_hook, comm_hooks.h): half the bytes on the wire, gradients rounded to bfloat16.
//   * no_sync() skips the allreduce for gradient accumulation; the next synced backward averages
//     the accumulated gradients.
//   * A parameter without a gradient is an error naming it. With find_unused_parameters it counts
//     as zero on this rank (its accumulated .grad, if any, still counts); a parameter that no
//     rank has a gradient for keeps .grad undefined, so the optimizer leaves it alone (PyTorch).
//     Which ones have a gradient anywhere is summed over the ranks alongside the buckets; as in
//     PyTorch, the host reads that sum (and so waits for it) only when a parameter had none here.
//   * Ranks with different numbers of batches: train inside a ddp::Join (join.h, PyTorch's Join).
//   * An exception inside backward (an error in a hook, out of memory) abandons that pass: the next
//     backward starts afresh, or, if part of the gradients had already been sent, raises an error
//     that says the ranks are out of step (they would otherwise average different batches).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/flat_buckets.h"
#include "ddp/gradient_hooks.h"
#include "ddp/process_group.h"

namespace ddp {

struct DdpOptions {
  double bucket_mb = 25;  // as PyTorch's bucket_cap_mb
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // at construction
  bool bf16_compress = false;     // PyTorch's bf16_compress_hook: buckets travel as bfloat16
};

// The engine behind DistributedDataParallel (no template: compiled once).
class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg, DdpOptions options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void set_sync(bool enabled) { sync_enabled_ = enabled; }
  bool sync_enabled() const { return sync_enabled_; }
  size_t bucket_count() const { return buckets_.size(); }

  // For Join (join.h). Called at the start of every synced backward, before any bucket is sent.
  void set_before_sync(std::function<void()> f) { before_sync_ = std::move(f); }
  // A rank with no batch left matches one synced backward of the others: every bucket's allreduce
  // (and the used-parameter one) in order, with zeros, waited for. Leaves .grad as the others' average.
  void shadow_backward();
  ProcessGroup& process_group() { return *pg_; }

 private:
  struct Bucket {
    std::vector<size_t> params;            // indices into params_
    std::vector<int64_t> offsets;          // where each parameter's gradient sits in `flat`
    torch::Tensor flat;                    // contiguous gradients of the bucket; after backward, .grad is in it
    std::vector<torch::Tensor> flat_list;  // {flat}: what the allreduce takes
    std::vector<torch::Tensor> slices;     // each parameter's part of `flat` (1-D), made once
    torch::Tensor world_size;              // 0-dim (CPU, the bucket's dtype): gradients enter divided by it
    torch::Tensor wire;                    // bf16_compress: the bucket as it is sent
    std::string what;                      // names the bucket's allreduce in errors
    size_t pending = 0;                    // parameters whose gradient is not ready yet
    c10::intrusive_ptr<c10d::Work> work;
  };
  void build_buckets(double bucket_mb);
  void on_gradient_ready(size_t param_index);
  void launch_ready_buckets();
  void finish_backward();
  void start_backward();
  void recover_from_abandoned_backward();
  size_t put_into_bucket(size_t i);
  c10::intrusive_ptr<c10d::Work> sum_over_ranks(std::vector<torch::Tensor>& tensors);  // none at world size 1
  void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);  // none: nothing to wait for
  void point_grads_at_buckets();  // skips the parameters marked in keep_undefined_

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  DdpOptions options_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::vector<size_t> slot_of_;    // parameter -> its place in the bucket
  std::vector<Bucket> buckets_;
  std::vector<char> ready_;
  std::vector<char> keep_undefined_;      // find_unused_parameters: no rank has a gradient for it
  torch::Tensor used_here_;               // find_unused_parameters: 1 where this rank has a gradient (CPU)...
  torch::Tensor used_anywhere_;           // ...and its sum over ranks (on the parameters' device)
  std::vector<torch::Tensor> used_list_;  // {used_anywhere_}: what the allreduce takes
  size_t next_bucket_ = 0;
  bool in_backward_ = false;  // a synced backward is running: its end-of-backward callback is queued
  // Set when the engine dropped this backward's end-of-backward callback unrun (an exception).
  std::shared_ptr<std::atomic<bool>> abandoned_ = std::make_shared<std::atomic<bool>>(false);
  bool sync_enabled_ = true;
  std::function<void()> before_sync_;     // Join's flag, while a Join lives
  std::unique_ptr<GradientHooks> hooks_;  // last: destroyed first, so no hook runs on a half-gone reducer
};

template <typename M>
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<M> module, std::shared_ptr<ProcessGroup> pg, DdpOptions options = {})
      : module_(std::move(module)), reducer_(std::make_unique<GradientReducer>(module_, std::move(pg), options)) {}

  M* operator->() const { return module_.get(); }               // model->forward(x), as on the plain module
  const std::shared_ptr<M>& module() const { return module_; }  // for checkpoints: a plain module
  size_t bucket_count() const { return reducer_->bucket_count(); }
  GradientReducer& reducer() { return *reducer_; }  // for Join (join.h)

  // While a NoSync lives, backward() only accumulates locally (no communication).
  class NoSync {
   public:
    explicit NoSync(GradientReducer& r) : r_(r), before_(r.sync_enabled()) { r_.set_sync(false); }
    ~NoSync() { r_.set_sync(before_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradientReducer& r_;
    bool before_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*reducer_); }

 private:
  std::shared_ptr<M> module_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace ddp
