#include "ddp/detail/bucket_schedule.h"

#include <algorithm>
#include <utility>

#include "ddp/error.h"  // defines: Error, DDP_CHECK

namespace ddp {

BucketSchedule::BucketSchedule(std::vector<torch::Tensor> params, std::vector<std::string> names,
                               const std::vector<std::vector<size_t>>& buckets, Steps steps, Settings settings)
    : params_(std::move(params)),
      names_(std::move(names)),
      steps_(std::move(steps)),
      settings_(std::move(settings)),
      bucket_of_(params_.size(), 0),
      slot_of_(params_.size(), 0),
      ready_(params_.size(), 0) {
  for (size_t k = 0; k < buckets.size(); ++k) {
    for (size_t slot = 0; slot < buckets[k].size(); ++slot) {
      bucket_of_[buckets[k][slot]] = k;
      slot_of_[buckets[k][slot]] = slot;
    }
    sizes_.push_back(buckets[k].size());
  }
  pending_ = sizes_;
  hooks_ = std::make_unique<GradientHooks>(params_, [this](size_t i) { on_gradient_ready(i); });
}

BucketSchedule::~BucketSchedule() = default;

void BucketSchedule::on_gradient_ready(size_t i) {
  if (!sync_enabled_) return;  // no_sync(): accumulate locally
  // An accumulator fires once per backward pass: a second report means the earlier pass never
  // reached its end (an exception inside backward).
  if (in_backward_ && (abandoned_->load() || ready_[i])) recover_from_abandoned_backward();
  if (!in_backward_) start_backward();
  const torch::Tensor& grad = params_[i].grad();
  DDP_CHECK(grad.defined() && !grad.is_sparse(), "parameter '" + names_[i] + "' has no dense gradient",
            settings_.engine + " supports dense gradients only");
  put(i);
}

void BucketSchedule::start_backward() {
  if (steps_.start) steps_.start();  // first, so that a failure there leaves nothing half-done
  pending_ = sizes_;
  std::fill(ready_.begin(), ready_.end(), 0);
  next_bucket_ = 0;
  // The callback runs once the whole backward pass is done, before backward() returns; an exception
  // that ends the pass first raises the flag instead (checked by the next pass).
  abandoned_ = hooks_->call_at_end_of_backward([this] { end_of_backward(); });
  in_backward_ = true;
}

void BucketSchedule::recover_from_abandoned_backward() {
  // Let the collectives already started finish before their memory is reused: the other ranks
  // pair them with their own buckets of the same index.
  const size_t sent = next_bucket_;
  steps_.wait_for_sent(sent, /*interrupted=*/true);
  in_backward_ = false;
  next_bucket_ = 0;
  if (sent > 0)
    throw Error("a backward pass on rank " + std::to_string(settings_.rank) + " ended part-way, after " +
                    std::to_string(sent) + " of " + std::to_string(bucket_count()) +
                    " gradient buckets had been sent: the ranks are out of step",
                "do not catch an error from backward() and go on; end the run (a restart resumes from the "
                "last snapshot). Every rank must run the same backward passes");
}

void BucketSchedule::put(size_t i) {
  ready_[i] = 1;
  const size_t k = bucket_of_[i];
  steps_.put(i, k, slot_of_[i]);
  if (--pending_[k] == 0) launch_ready_buckets();
}

void BucketSchedule::launch_ready_buckets() {
  // Strictly in bucket order: every rank must issue the same collectives in the same order.
  while (next_bucket_ < bucket_count() && pending_[next_bucket_] == 0) steps_.launch(next_bucket_++);
}

void BucketSchedule::put_missing() {
  if (next_bucket_ == bucket_count()) return;
  // All go in first; then the buckets they completed are sent, in order.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    ready_[i] = 1;
    steps_.put(i, bucket_of_[i], slot_of_[i]);
    --pending_[bucket_of_[i]];
  }
  launch_ready_buckets();
}

void BucketSchedule::end_of_backward() {
  in_backward_ = false;
  torch::NoGradGuard no_grad;
  if (next_bucket_ < bucket_count() && !settings_.fill_missing) {
    std::string unused;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) unused += (unused.empty() ? "" : ", ") + names_[i];
    steps_.wait_for_sent(next_bucket_, /*interrupted=*/false);  // so the group stays usable
    next_bucket_ = 0;
    throw Error("these parameters received no gradient in this backward pass: " + unused, settings_.unused_hint);
  }
  steps_.finish();
}

}  // namespace ddp
