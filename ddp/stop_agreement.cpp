#include "ddp/stop_agreement.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "ddp/process_group.h"
#include "ddp/stop_signal.h"

namespace ddp {

StopAgreement::StopAgreement(ProcessGroup* pg, double check_seconds)
    : pg_(pg), check_seconds_(check_seconds), last_check_(std::chrono::steady_clock::now()) {}

bool StopAgreement::should_stop() {
  if (!pg_) return stop_requested();
  const int64_t call = calls_++;
  if (call < next_check_) return false;

  // Rank 0 proposes the next interval from the steps since the last check; the others add 0, so
  // the sum is its proposal and every rank schedules the same next check.
  double proposal = 0;
  if (pg_->rank() == 0) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_check_).count();
    const double per_step = checks_ == 0 ? 0 : seconds / static_cast<double>(interval_);
    const double wanted = per_step > 0 ? std::floor(check_seconds_ / per_step) : 1.0;
    proposal = std::clamp(wanted, 1.0, 2.0 * static_cast<double>(interval_));
  }
  // One small allreduce and one read: the only host synchronisation, and only at a check step.
  auto votes = torch::tensor({stop_requested() ? 1.0 : 0.0, proposal}, torch::kFloat64).to(pg_->device());
  pg_->allreduce_sum(votes, "stop agreement");
  votes = votes.cpu();
  const double* sum = votes.data_ptr<double>();
  ++checks_;
  interval_ = std::max<int64_t>(1, static_cast<int64_t>(sum[1]));
  next_check_ = call + interval_;
  last_check_ = std::chrono::steady_clock::now();
  return sum[0] > 0;
}

}  // namespace ddp
