// defines: ForwardSync — what DistributedDataParallel does around the module's forward, as PyTorch's
//          DDP does in _pre_forward/_post_forward (torch 2.11, nn/parallel/distributed.py):
//   * Buffers (broadcast_buffers, on by default): rank 0's buffers (BatchNorm's running statistics
//     and batch counter, ...) are broadcast to every rank at the start of a forward through the
//     wrapper, so every rank normalises with rank 0's statistics and a snapshot of any rank holds
//     the same buffers. One broadcast per dtype and device (PyTorch coalesces them the same way);
//     none when the module has no buffers or the world has one rank. Inside a Join (join.h) the
//     source is the last rank still training, and the ranks that joined take part.
//     When: as PyTorch's will_sync_module_buffers, a forward broadcasts if the previous forward
//     through the wrapper ran with gradients enabled and outside no_sync() (or there was none
//     yet). So with no_sync() gradient accumulation the first micro-batch broadcasts; the first
//     evaluation forward after training broadcasts, the next ones do not; and the first training
//     forward after an evaluation under NoGradGuard does not (PyTorch's rule, kept as it is).
//   * A forward that skips the wrapper (ddp_model->forward(x): operator-> reaches the plain
//     module) skips the broadcast. Where that loses something (broadcast_buffers is on and the
//     forward changed a buffer, as BatchNorm does in training), the next backward fails at its
//     first gradient, on every rank, naming the fix, before any gradient is sent: the forward
//     must be ddp_model(x) or ddp_model.forward(x). A model without buffers (the usual MLP or
//     CNN) loses nothing and may keep operator->. An evaluation through operator-> changes no
//     buffer and so cannot be caught: it uses this rank's own statistics (call
//     DistributedDataParallel::sync_buffers() first, or evaluate through the wrapper).
//   * SyncBatchNorm layers (sync_batch_norm.h) without a process group get the wrapper's, as
//     PyTorch's SyncBatchNorm defaults to the group DDP runs on (WORLD).
// Where we differ from PyTorch: the check above (PyTorch has no operator-> to skip through); a
// world of one rank sends nothing.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/detail/gradient_hooks.h"
#include "ddp/process_group.h"

namespace ddp {

class ForwardSync {
 public:
  // Construct it before the gradient reducer: its check then runs before any gradient is sent.
  ForwardSync(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg, bool broadcast_buffers);
  ~ForwardSync();
  ForwardSync(const ForwardSync&) = delete;
  ForwardSync& operator=(const ForwardSync&) = delete;

  // Around the module's forward: before_forward() broadcasts when PyTorch would; after_forward()
  // notes whether the next one must (this forward ran with gradients enabled and will be synced
  // in backward, i.e. outside no_sync()) and what the buffers are now.
  void before_forward();
  void after_forward(bool backward_will_sync);

  // Broadcasts rank 0's buffers now (every rank must call it), whatever the rule above says;
  // inside a Join, the buffers of the source it agrees on (below).
  void broadcast_buffers();
  // The broadcast from rank `root` (a rank that joined a Join shadows the others' with it).
  void broadcast_buffers_from(int root);
  // Inside a Join (join.h): who sends the buffers, agreed with the ranks that joined before each
  // broadcast (the last rank still training, as PyTorch's _find_common_rank). nullptr: rank 0.
  void set_buffer_source(std::function<int()> source) { source_ = std::move(source); }

  // True when the next forward through the wrapper will broadcast.
  bool will_broadcast() const;
  // True when forwards through the wrapper broadcast buffers at all (the option on, buffers there).
  bool broadcasts_buffers() const { return enabled_ && has_buffers_ && !pg_->skips_collectives(); }
  // The streams its gradient hooks run on (GradientHooks::streams; none without buffers to check).
  std::vector<c10::Stream> gradient_streams() const { return hooks_ ? hooks_->streams() : std::vector<c10::Stream>{}; }

 private:
  std::vector<torch::Tensor> buffers() const;  // the module's defined buffers, in registration order
  std::vector<int64_t> versions() const;       // their version counters (in-place writes count up)
  void on_gradient();                          // the first gradient of each backward pass checks

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  bool enabled_;
  bool has_buffers_ = false;
  bool next_forward_broadcasts_ = true;  // PyTorch's require_forward_param_sync
  std::function<int()> source_;          // set by a Join
  std::vector<int64_t> versions_after_forward_;
  bool in_backward_ = false;                      // this backward pass was checked; reset when it ends...
  std::shared_ptr<std::atomic<bool>> abandoned_;  // ...or when an exception ended it first
  std::unique_ptr<GradientHooks> hooks_;          // last: destroyed first
};

}  // namespace ddp
