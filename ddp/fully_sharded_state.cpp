// FullyShardedDataParallel's state: the full state_dict gathered into rank 0's host memory and loaded
// from it, one unit at a time; the shards as a ShardedState (sharded_state.h); the memory queries.
#include <map>

#include "ddp/detail/agreement.h"    // defines: attempt, agree
#include "ddp/detail/engine_core.h"  // defines: broadcast_coalesced
#include "ddp/detail/sharded_collectives.h"
#include "ddp/fully_sharded.h"

namespace ddp {

namespace {
// A copy in host memory (of a view: only its elements).
torch::Tensor to_host(const torch::Tensor& t) { return t.detach().to(torch::kCPU, t.scalar_type(), false, true); }
}  // namespace

// ---- state dicts ----------------------------------------------------------------------------

TensorDict FullyShardedEngine::full_state_dict() {
  const bool root = pg_->rank() == 0;
  std::map<std::string, torch::Tensor> by_name;  // rank 0's, in host memory
  torch::NoGradGuard no_grad;
  for (auto& s : units_) {  // one unit gathered at a time, on every rank
    auto flat = torch::empty({s.layout.padded_numel}, s.shard.options().requires_grad(false));
    flat.narrow(0, pg_->rank() * s.layout.shard_numel, s.layout.shard_numel).copy_(s.shard.detach());
    std::vector<torch::Tensor> flats{flat};
    all_gather_slices(*pg_, flats, "FullyShardedDataParallel: full state_dict of " + s.label());
    if (!root) continue;
    for (size_t i = 0; i < s.params.size(); ++i)
      by_name[s.layout.param_names[i]] =
          to_host(flat.narrow(0, s.plan.offsets[i], s.params[i].numel()).view(s.layout.shapes[i]));
  }
  TensorDict out;
  if (!root) return out;
  for (const auto& p : root_->named_parameters(true)) out.emplace_back(p.key(), by_name.at(p.key()));
  for (const auto& b : root_->named_buffers(true)) out.emplace_back(b.key(), to_host(b.value()));
  return out;
}

void FullyShardedEngine::load_full_state_dict(const TensorDict& state) {
  const bool root = pg_->rank() == 0;
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  // Rank 0 checks its dict before anything changes; every rank learns the verdict.
  detail::agree(*pg_, detail::attempt([&] {
    if (!root) return;
    const std::string hint = "load a state_dict of this model (full_state_dict() writes one), on rank 0";
    for (const auto& s : units_)
      for (size_t i = 0; i < s.params.size(); ++i) {
        const auto& name = s.layout.param_names[i];
        const auto it = by_name.find(name);
        DDP_CHECK(it != by_name.end(), "FullyShardedDataParallel: the state_dict has no " + name, hint);
        DDP_CHECK(it->second.sizes().vec() == s.layout.shapes[i],
                  "FullyShardedDataParallel: " + name + " has shape " + c10::str(it->second.sizes()) +
                      " in the state_dict, " + c10::str(c10::IntArrayRef(s.layout.shapes[i])) + " in the model",
                  hint);
      }
    for (const auto& b : root_->named_buffers(true))
      DDP_CHECK(by_name.count(b.key()), "FullyShardedDataParallel: the state_dict has no buffer " + b.key(), hint);
  }));
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) reshard(u);
  for (auto& s : units_) {  // rank 0's unit to every rank, one at a time; each keeps its slice
    auto flat = torch::zeros({s.layout.padded_numel}, s.shard.options().requires_grad(false));
    if (root)
      for (size_t i = 0; i < s.params.size(); ++i)
        flat.narrow(0, s.plan.offsets[i], s.params[i].numel()).copy_(by_name.at(s.layout.param_names[i]).reshape(-1));
    if (pg_->size() > 1) {
      std::vector<torch::Tensor> one{flat};
      pg_->broadcast(one, 0, "FullyShardedDataParallel: loading the state_dict (" + s.label() + ")");
    }
    s.shard.detach().copy_(flat.narrow(0, pg_->rank() * s.layout.shard_numel, s.layout.shard_numel));
  }
  std::vector<torch::Tensor> buffers;
  for (auto& b : root_->named_buffers(true)) {
    if (root) b.value().copy_(by_name.at(b.key()));
    buffers.push_back(b.value());
  }
  if (pg_->size() > 1 && !buffers.empty())
    broadcast_coalesced(buffers, 0, *pg_, "FullyShardedDataParallel: loading the state_dict (buffers)");
}

// ---- the shards (ShardedState) --------------------------------------------------------------

std::vector<ShardedParameter> FullyShardedEngine::sharded_parameters() const {
  std::vector<ShardedParameter> out;
  for (const auto& s : units_)
    for (size_t i = 0; i < s.params.size(); ++i)
      out.push_back({s.layout.param_names[i], s.layout.shapes[i], torch::kFloat32});
  return out;
}

std::vector<ShardedGroup> FullyShardedEngine::sharded_groups() const {
  std::vector<ShardedGroup> out;
  size_t first = 0;  // the unit's first parameter in sharded_parameters()
  for (const auto& s : units_) {
    ShardedGroup g;
    g.numel = s.layout.numel;
    g.padded_numel = s.layout.padded_numel;
    for (size_t i = 0; i < s.params.size(); ++i) {
      g.params.push_back(first + s.plan.params[i]);
      g.offsets.push_back(s.plan.offsets[i]);
    }
    first += s.params.size();
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<torch::Tensor> FullyShardedEngine::parameter_shards() {
  std::vector<torch::Tensor> out;
  for (const auto& shard : shards_) out.push_back(shard.detach());
  return out;
}

std::vector<torch::Tensor> FullyShardedEngine::gradient_shards() {
  std::vector<torch::Tensor> out;
  for (const auto& shard : shards_) out.push_back(shard.grad());
  return out;
}

void FullyShardedEngine::clear_gradients(bool set_to_none) {
  for (auto& s : units_) s.drop_gradients(set_to_none);
  has_gradients_ = false;
}

// ---- memory ---------------------------------------------------------------------------------

int64_t FullyShardedEngine::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& shard : shards_) {
    bytes += static_cast<int64_t>(shard.nbytes());
    if (shard.grad().defined()) bytes += static_cast<int64_t>(shard.grad().nbytes());
  }
  return bytes;
}

int64_t FullyShardedEngine::gathered_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : units_) bytes += s.gathered_bytes();
  return bytes;
}

int64_t FullyShardedEngine::full_gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : units_) bytes += s.full_gradient_bytes();
  return bytes;
}

int FullyShardedEngine::units_holding_reduce_input() const {
  int n = 0;
  for (const auto& s : units_) n += s.holds_reduce_input() ? 1 : 0;
  return n;
}

}  // namespace ddp
