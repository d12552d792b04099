// defines: NoSync — the guard that pauses a wrapper's gradient sync for gradient accumulation
//          (PyTorch's `with model.no_sync():`), and GradientSyncSwitch, what it switches.
//   While sync is off, backward() only accumulates .grad locally (no communication); the next
//   backward with sync on reduces what accumulated. Two faces, one switch:
//     { auto quiet = model.no_sync(); loss.backward(); }  // PyTorch's DDP and FSDP1: a scope
//     model.set_requires_gradient_sync(false);             // FSDP2's name: until set to true again
//   DistributedDataParallel, TensorDataParallel, ZeroDataParallel and FullyShardedDataParallel have both.
#pragma once

namespace ddp {

// What a wrapper's engine implements: whether its next backward communicates.
class GradientSyncSwitch {
 public:
  virtual ~GradientSyncSwitch() = default;
  virtual bool requires_gradient_sync() const = 0;
  virtual void set_requires_gradient_sync(bool on) = 0;
};

// Turns sync off for its lifetime, then back to what it was (so guards nest). Made by no_sync().
class NoSync {
 public:
  explicit NoSync(GradientSyncSwitch& s) : s_(s), before_(s.requires_gradient_sync()) {
    s_.set_requires_gradient_sync(false);
  }
  ~NoSync() { s_.set_requires_gradient_sync(before_); }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  GradientSyncSwitch& s_;
  bool before_;
};

}  // namespace ddp
