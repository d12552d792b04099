#include "ddp/sharded_adamw.h"

#include <cmath>

#include "ddp/error.h"

namespace ddp {

namespace {
template <typename T>
std::vector<T> pick(const std::vector<T>& v, const std::vector<size_t>& which) {
  std::vector<T> out;
  for (size_t k : which) out.push_back(v[k]);
  return out;
}
}  // namespace

ShardedAdamW::ShardedAdamW(std::shared_ptr<ShardedState> state, AdamOptions options)
    : state_(std::move(state)), options_(options) {
  DDP_CHECK(state_, "ShardedAdamW needs a sharded model",
            "wrap the model in ZeroDataParallel or FullyShardedDataParallel first");
  // Allocated up front (torch allocates at the first step): the state's size shows from the start.
  for (const auto& shard : state_->parameter_shards()) {
    exp_avg_.push_back(torch::zeros_like(shard.detach()));
    exp_avg_sq_.push_back(torch::zeros_like(shard.detach()));
  }
  DDP_CHECK(!exp_avg_.empty(), "ShardedAdamW: the model has no trainable parameters",
            "give it a model with parameters");
  applied_ = torch::zeros({}, exp_avg_[0].options().dtype(torch::kFloat32));
}

void ShardedAdamW::set_steps_taken(int64_t steps, std::optional<int64_t> applied) {
  steps_ = steps;
  applied_.fill_(static_cast<double>(applied.value_or(steps)));
}

void ShardedAdamW::zero_grad(bool set_to_none) { state_->clear_gradients(set_to_none); }

std::vector<size_t> ShardedAdamW::stepping() {
  std::vector<size_t> out;
  const auto grads = state_->gradient_shards();
  for (size_t k = 0; k < grads.size(); ++k)
    if (grads[k].defined()) out.push_back(k);
  return out;
}

double ShardedAdamW::clip_grad_norm(double max_norm) {
  DDP_CHECK(state_->has_gradients(), "clip_grad_norm() without a synchronized backward pass since zero_grad()",
            "call loss.backward() outside no_sync() first");
  if (scaler_attached()) grad_scaler_->unscale_(*this);  // PyTorch: scaler.unscale_(optimizer) before clipping
  torch::NoGradGuard no_grad;
  const auto grads = pick(state_->gradient_shards(), stepping());
  // Sum of squares of this rank's slices (padding is zero), then the sum over all ranks.
  auto squares = torch::zeros({1}, exp_avg_[0].options().dtype(torch::kFloat64));
  if (!grads.empty())
    for (const auto& n : torch::_foreach_norm(grads, 2)) squares += n.to(torch::kFloat64).pow(2);
  state_->process_group().allreduce_sum(squares, "allreduce of the gradient norm (gradient clipping)");
  const double norm = std::sqrt(squares.item<double>());
  if (max_norm > 0 && !grads.empty()) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1) torch::_foreach_mul_(grads, coefficient);
  }
  return norm;
}

void ShardedAdamW::step() {
  DDP_CHECK(state_->has_gradients(), "ShardedAdamW::step() without a synchronized backward pass since zero_grad()",
            "call loss.backward() outside no_sync() before step(): only a synchronized pass reduces the gradients");
  if (scaler_attached()) {
    grad_scaler_->step(*this);  // comes back as step_unless_found_inf
    grad_scaler_->update();
    return;
  }
  ++steps_;
  applied_.add_(1);
  // In groups of about one bucket: adam_step's temporaries (the denominators) are then a bucket's
  // size, not the whole shard's (torch.optim's foreach AdamW allocates them for every parameter at once).
  const auto which = stepping();
  const auto params = pick(state_->parameter_shards(), which), grads = pick(state_->gradient_shards(), which);
  const auto exp_avg = pick(exp_avg_, which), exp_avg_sq = pick(exp_avg_sq_, which);
  const int64_t cap = state_->step_group_bytes();
  size_t first = 0;
  int64_t bytes = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    bytes += static_cast<int64_t>(params[k].nbytes());
    if (bytes < cap && k + 1 < params.size()) continue;
    const auto group = [&](const std::vector<torch::Tensor>& v) {
      return std::vector<torch::Tensor>(v.begin() + first, v.begin() + k + 1);
    };
    adam_step(group(params), group(grads), group(exp_avg), group(exp_avg_sq), steps_, options_);
    first = k + 1;
    bytes = 0;
  }
  state_->parameter_shards_changed();
}

void ShardedAdamW::step_unless_found_inf(const torch::Tensor& found_inf) {
  DDP_CHECK(state_->has_gradients(), "ShardedAdamW::step() without a synchronized backward pass since zero_grad()",
            "call loss.backward() outside no_sync() before step(): only a synchronized pass reduces the gradients");
  ++steps_;
  const auto which = stepping();
  const auto params = pick(state_->parameter_shards(), which), grads = pick(state_->gradient_shards(), which);
  if (!params.empty()) {
    const auto skip = found_inf.to(params[0].device(), /*non_blocking=*/true);
    // One fused kernel for all slices (no temporaries to bound, unlike the multi-tensor step).
    adam_step(params, grads, pick(exp_avg_, which), pick(exp_avg_sq_, which), applied_, options_, skip);
  }
  state_->parameter_shards_changed();  // every rank, skipped or not: the ranks issue the same collectives
}

std::vector<torch::Tensor> ShardedAdamW::gradient_slices() {
  DDP_CHECK(state_->has_gradients(), "GradScaler::unscale_() without a synchronized backward pass since zero_grad()",
            "call backward() on the scaled loss outside no_sync() first");
  return pick(state_->gradient_shards(), stepping());
}

std::function<void()> ShardedAdamW::combine_found_inf(torch::Tensor& found_inf) {
  ProcessGroup& pg = state_->process_group();
  if (pg.skips_collectives()) return {};
  std::vector<torch::Tensor> tensors{found_inf};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  auto work = pg.backend().allreduce(tensors, max);
  return [&pg, work] { pg.wait(work, "allreduce of GradScaler's found_inf (inf/NaN in any rank's gradient slice)"); };
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : exp_avg_) bytes += static_cast<int64_t>(t.nbytes());
  for (const auto& t : exp_avg_sq_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace ddp
