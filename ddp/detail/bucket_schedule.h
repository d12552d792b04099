// defines: BucketSchedule — the backward pass of a bucketed data-parallel engine, one state machine
//          that DistributedDataParallel's GradientReducer and ZeroDataParallel's ZeroReducer share:
//          when each gradient goes into its bucket and when each bucket is sent. What a bucket is
//          and how it is sent (an allreduce, a reduce-scatter) stays the engine's: its Steps.
//          It is the wrappers' GradientSyncSwitch (no_sync.h: NoSync, set_requires_gradient_sync).
// What the schedule owns:
//   * the gradient-ready hook on each parameter and the end-of-backward callback (gradient_hooks.h);
//   * no_sync(): while sync is off, a backward pass only accumulates .grad locally;
//   * each parameter's ready flag and each bucket's count of gradients still to come, reset when a
//     synced pass starts;
//   * sending buckets strictly in bucket order as they complete, even when a later one completes
//     first: every rank must issue the same collectives in the same order;
//   * the check that each gradient is dense, and at the end of the pass that every parameter got one
//     (an error naming those that did not, unless the engine fills them in: put_missing);
//   * a pass that an exception abandoned (the engine dropped the end-of-backward callback unrun, or
//     a parameter reports twice): found when the next pass starts, the buckets already sent are
//     waited for, and the pass is forgotten if none was sent, else an error says the ranks are out
//     of step (they would otherwise average different batches).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/detail/gradient_hooks.h"  // defines: GradientHooks
#include "ddp/no_sync.h"                // defines: GradientSyncSwitch, NoSync

namespace ddp {

class BucketSchedule : public GradientSyncSwitch {
 public:
  // What the engine does at each point of a synced backward pass (all run inside backward()).
  struct Steps {
    std::function<void()> start;  // optional: a synced pass begins, before any gradient goes in
    // params[param].grad() into its bucket (undefined: only from put_missing).
    std::function<void(size_t param, size_t bucket, size_t slot)> put;
    std::function<void(size_t bucket)> launch;  // the bucket is complete and its turn has come: send it
    // The pass is abandoned (interrupted) or missing gradients: wait for buckets [0, sent), so the
    // process group stays usable and their memory can be reused.
    std::function<void(size_t sent, bool interrupted)> wait_for_sent;
    std::function<void()> finish;  // every bucket was sent: wait for them and deliver the gradients
  };
  struct Settings {
    std::string engine;         // names the engine in errors: "DistributedDataParallel"
    std::string unused_hint;    // the fix when a parameter got no gradient in a pass
    bool fill_missing = false;  // find_unused_parameters: no error; finish calls put_missing()
    int rank = 0;               // this rank, for the out-of-step error
  };

  // `buckets[k]`: bucket k's parameters (indices into `params`) in slot order; each parameter in
  // exactly one bucket. `names` name the parameters in errors.
  BucketSchedule(std::vector<torch::Tensor> params, std::vector<std::string> names,
                 const std::vector<std::vector<size_t>>& buckets, Steps steps, Settings settings);
  ~BucketSchedule() override;
  BucketSchedule(const BucketSchedule&) = delete;
  BucketSchedule& operator=(const BucketSchedule&) = delete;

  // GradientSyncSwitch: off, a backward pass only accumulates .grad locally (no_sync.h).
  void set_requires_gradient_sync(bool on) override { sync_enabled_ = on; }
  bool requires_gradient_sync() const override { return sync_enabled_; }
  bool in_backward() const { return in_backward_; }  // a synced pass runs: its end is still to come
  size_t bucket_count() const { return pending_.size(); }
  // The streams the gradient hooks run on (GradientHooks::streams).
  std::vector<c10::Stream> gradient_streams() const { return hooks_->streams(); }

  // From Steps::finish with fill_missing: the parameters without a gradient in this pass go into
  // their buckets too (put), and the buckets they complete are sent. Nothing if all were sent.
  void put_missing();

 private:
  void on_gradient_ready(size_t param);
  void start_backward();
  void recover_from_abandoned_backward();
  void put(size_t param);
  void launch_ready_buckets();
  void end_of_backward();

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  Steps steps_;
  Settings settings_;
  std::vector<size_t> bucket_of_, slot_of_;  // parameter -> its bucket, and its place in it
  std::vector<size_t> pending_;              // per bucket: gradients not in it yet
  std::vector<size_t> sizes_;                // per bucket: its number of parameters
  std::vector<char> ready_;                  // per parameter: its gradient is in its bucket
  size_t next_bucket_ = 0;                   // the next bucket to send
  bool in_backward_ = false;                 // a synced pass runs: its end-of-backward callback is queued
  bool sync_enabled_ = true;
  // Set when the engine dropped this pass's end-of-backward callback unrun (an exception).
  std::shared_ptr<std::atomic<bool>> abandoned_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<GradientHooks> hooks_;  // last: destroyed first, so no hook runs on a half-gone schedule
};

}  // namespace ddp
