// defines: Joinable, JoinHook — what an engine supplies to ddp::Join (join.h), as PyTorch's
//          torch.distributed.algorithms.Joinable and JoinHook: the hooks a rank that has run out of
//          batches runs to shadow the collectives of the ranks still training, and to take the
//          final model once every rank has joined. Join knows only this interface; each engine
//          (DistributedDataParallel, ZeroDataParallel) implements it beside its own code.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace ddp {

class ProcessGroup;

// What a rank does for one engine while a Join lives (PyTorch's JoinHook). Made by
// Joinable::join_hook(), it lives as long as the Join.
class JoinHook {
 public:
  virtual ~JoinHook() = default;
  // Join's notifications, while it lives (nullptr, nullptr: no more): the engine calls `notify` at
  // the start of every synced step on a rank still training, before anything of the step is sent
  // (PyTorch's Join.notify_join_context), and, when its forwards broadcast buffers, `buffer_source`
  // before each such broadcast, which returns the rank that sends them.
  virtual void set_notifications(std::function<void()> notify, std::function<int()> buffer_source) = 0;
  // A rank with no batch left: matches one synced step of the others, every collective in order
  // (PyTorch's main_hook; DDP: the gradient buckets' allreduces, with zeros).
  virtual void main_hook() = 0;
  // ...takes part in the buffer broadcast from `root` that the others make before a forward; a
  // ddp::Error when this rank's engine broadcasts no buffers (the ranks are wrapped differently).
  virtual void shadow_buffer_broadcast(int root) = 0;
  // Every rank, once all have joined: the final state from `last_joiner`, the highest of the ranks
  // that had the most batches (PyTorch's post_hook; DDP: its parameters and buffers).
  virtual void post_hook(int last_joiner) = 0;
};

// An engine that can train inside a Join (PyTorch's Joinable).
class Joinable {
 public:
  virtual ~Joinable() = default;
  virtual ProcessGroup& join_process_group() = 0;
  // This engine's hooks, or nullptr when it cannot train on uneven inputs (ZeRO: each rank owns a
  // slice of every optimizer step): Join then checks at once that every rank has as many batches.
  virtual std::unique_ptr<JoinHook> join_hook() = 0;
  // The engine in messages ("ZeroDataParallel (ZeRO stage 2)").
  virtual std::string join_name() const = 0;
};

}  // namespace ddp
