// FullyShardedDataParallel's construction (the units planned, checked against rank 0's and sharded
// one at a time) and the units' order in forward and backward. The state dicts, the shards and the
// memory queries: fully_sharded_state.cpp; one unit's moves: detail/fsdp_unit.cpp.
#include "ddp/fully_sharded.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "ddp/detail/engine_core.h"      // defines: broadcast_coalesced
#include "ddp/detail/flat_buckets.h"     // defines: plan_flat, padded_numel
#include "ddp/detail/fsdp_checkpoint.h"  // defines: checkpointed_call
#include "ddp/host_memory.h"             // defines: release_freed_host_memory
#include "ddp/process.h"                 // defines: process_settings

namespace ddp {

using detail::FsdpUnit;
using detail::Gathered;
using detail::Reduced;

// ---- construction ---------------------------------------------------------------------------

struct FullyShardedEngine::Plan {
  std::vector<std::string> unit_paths;  // the user's units, by their path in the root
  std::vector<torch::nn::Module*> unit_modules;
  // Each unit's parameters with their full names; [0] is the root unit (what no unit holds).
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> members;
  bool from_host = false;  // some parameter was on the CPU while the device is not
};

FullyShardedEngine::FullyShardedEngine(std::shared_ptr<torch::nn::Module> root,
                                       std::vector<std::shared_ptr<torch::nn::Module>> units,
                                       std::shared_ptr<ProcessGroup> pg, FullyShardedOptions options)
    : root_(std::move(root)), pg_(std::move(pg)), options_(options) {
  DDP_CHECK(root_ != nullptr, "FullyShardedDataParallel: no module given", "pass the model to wrap");
  DDP_CHECK(pg_ != nullptr, "FullyShardedDataParallel: no process group given", "pass init_process_group's group");
  Plan plan = plan_units(units);
  if (pg_->size() > 1) check_same_model(plan);
  shard_units(plan);
  install_hooks();
}

FullyShardedEngine::~FullyShardedEngine() = default;

FullyShardedEngine::Plan FullyShardedEngine::plan_units(
    const std::vector<std::shared_ptr<torch::nn::Module>>& units) const {
  Plan plan;
  // Where each submodule sits in the root, by object.
  std::unordered_map<const torch::nn::Module*, std::string> path_of;
  for (const auto& item : root_->named_modules("", /*include_self=*/false)) path_of[item.value().get()] = item.key();
  for (const auto& unit : units) {
    DDP_CHECK(unit != nullptr, "FullyShardedDataParallel: a unit is null", "pass submodules of the model as units");
    const auto it = path_of.find(unit.get());
    DDP_CHECK(it != path_of.end(),
              "FullyShardedDataParallel: the unit " + unit->name() + " is not a submodule of the model it wraps",
              "choose units among the model's submodules (e.g. model->blocks[i].ptr()), registered with "
              "register_module");
    DDP_CHECK(std::find(plan.unit_paths.begin(), plan.unit_paths.end(), it->second) == plan.unit_paths.end(),
              "FullyShardedDataParallel: the unit " + it->second + " is given twice", "name each unit once");
    plan.unit_paths.push_back(it->second);
    plan.unit_modules.push_back(unit.get());
  }
  const auto& paths = plan.unit_paths;
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < paths.size(); ++j)
      DDP_CHECK(i == j || paths[j].rfind(paths[i] + ".", 0) != 0,
                "FullyShardedDataParallel: the unit " + paths[j] + " lies inside the unit " + paths[i],
                "choose units that do not nest (e.g. the blocks, not also their layers)");

  // Wrapped already? (Checked before anything changes: a second wrapper would re-point the parameters.)
  DDP_CHECK(!detail::find_call_interceptor(*root_),
            "FullyShardedDataParallel: " + root_->name() + " already has an interceptor (it is wrapped already)",
            "wrap each model once: destroy the first wrapper before wrapping it again");
  for (size_t u = 0; u < units.size(); ++u)
    DDP_CHECK(!detail::find_call_interceptor(*units[u]),
              "FullyShardedDataParallel: the unit " + paths[u] + " already has an interceptor (it is wrapped already)",
              "wrap each model once: destroy the first wrapper before wrapping it again");

  // Each parameter to its unit; the rest to the root unit.
  const auto named = root_->named_parameters(/*recurse=*/true);
  plan.members.resize(units.size() + 1);
  std::map<const c10::TensorImpl*, std::string> owner;  // parameter -> the unit that has it
  for (size_t u = 0; u < units.size(); ++u) {
    for (const auto& p : units[u]->named_parameters(true)) {
      const std::string name = paths[u] + "." + p.key();
      const auto [it, fresh] = owner.emplace(p.value().unsafeGetTensorImpl(), paths[u]);
      DDP_CHECK(
          fresh,
          "FullyShardedDataParallel: the parameter " + name + " is in two units, " + it->second + " and " + paths[u],
          "tie weights only inside one unit: put the modules that share it in one unit, or leave them "
          "to the root unit");
      plan.members[u + 1].emplace_back(name, p.value());
    }
  }
  for (const auto& p : named)
    if (!owner.count(p.value().unsafeGetTensorImpl())) plan.members[0].emplace_back(p.key(), p.value());
  // A module outside every unit that holds a unit's parameter (a weight tied across the boundary).
  auto inside_a_unit = [&](const std::string& path) {
    for (const auto& unit_path : paths)
      if (path == unit_path || path.rfind(unit_path + ".", 0) == 0) return true;
    return false;
  };
  for (const auto& item : root_->named_modules("", /*include_self=*/true)) {
    if (inside_a_unit(item.key())) continue;
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      const auto it = owner.find(p.value().unsafeGetTensorImpl());
      DDP_CHECK(it == owner.end(),
                "FullyShardedDataParallel: the parameter " + (item.key().empty() ? "" : item.key() + ".") + p.key() +
                    " outside the units is also in the unit " + it->second,
                "tie weights only inside one unit: leave the modules that share it all in the root unit (do not "
                "make either one a unit), or put them in one unit");
    }
  }
  for (const auto& p : named)
    DDP_CHECK(p.value().is_floating_point(),
              "FullyShardedDataParallel: the parameter " + p.key() + " is not floating point",
              "keep only floating-point tensors as parameters (register others as buffers)");
  return plan;
}

// Every rank must name the same units holding the same parameters (names, shapes, dtypes) as rank 0:
// compared through the store before any collective, so that a difference is named here instead of
// ending in mismatched collectives.
void FullyShardedEngine::check_same_model(const Plan& plan) {
  std::string mine = "units";  // first the units' names, then what each holds
  for (const auto& path : plan.unit_paths) mine += (mine == "units" ? " " : ", ") + path;
  mine += "\n";
  for (size_t u = 0; u < plan.members.size(); ++u) {
    mine += (u == 0 ? std::string("the root unit") : "unit " + plan.unit_paths[u - 1]) + "\n";
    for (const auto& [name, p] : plan.members[u])
      mine += "  " + name + " of shape " + c10::str(p.sizes()) + " (" + c10::toString(p.scalar_type()) + ")\n";
  }
  const auto all = pg_->all_gather_strings(mine);
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    for (size_t at = 0, end; at < text.size(); at = end + 1) {
      end = text.find('\n', at);
      out.push_back(text.substr(at, end - at));
    }
    return out;
  };
  const auto root = lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto theirs = lines(all[r]);
    size_t i = 0;
    while (i < root.size() && i < theirs.size() && root[i] == theirs[i]) ++i;
    auto said = [](const std::vector<std::string>& l, size_t k) {
      return k < l.size() ? "'" + l[k].substr(l[k].find_first_not_of(' ')) + "'" : std::string("nothing more");
    };
    throw Error("FullyShardedDataParallel: the ranks hold different models: rank " + std::to_string(r) + " has " +
                    said(theirs, i) + " where rank 0 has " + said(root, i) +
                    (pg_->rank() == 0 || pg_->rank() == static_cast<int>(r) ? "" : " (this rank is as rank 0)"),
                "every rank must build the same model with the same options and name the same units in the same "
                "order");
  }
}

// Unit by unit: the unit's parameters flattened on the device (rank 0's, broadcast), this rank's
// slice kept as its float32 shard, the module's parameters re-pointed to the unit's gathered buffer
// (freed until a gather), so the host (or device) memory the model was built in goes as we go.
void FullyShardedEngine::shard_units(Plan& plan) {
  const int64_t n = pg_->size();
  const auto named = root_->named_parameters(true);
  device_ = options_.device.value_or(named.is_empty() ? pg_->device() : named.values()[0].device());
  param_dtype_ = named.is_empty() ? torch::kFloat32 : named.values()[0].scalar_type();
  for (const auto& p : named)
    DDP_CHECK(p.value().scalar_type() == param_dtype_,
              "FullyShardedDataParallel: the parameters have more than one dtype (" + p.key() + ")",
              "give every parameter one dtype; choose the compute dtype with FullyShardedOptions::param_dtype");
  dtypes_.compute = options_.param_dtype.value_or(param_dtype_);
  dtypes_.reduce = options_.reduce_dtype.value_or(dtypes_.compute);
  const bool broadcast = options_.broadcast_from_rank0 && n > 1;

  torch::NoGradGuard no_grad;
  units_.resize(plan.members.size());
  for (size_t u = 0; u < plan.members.size(); ++u) {
    FsdpUnit& s = units_[u];
    s.module = u == 0 ? nullptr : plan.unit_modules[u - 1];
    s.layout.name = u == 0 ? "" : plan.unit_paths[u - 1];
    for (const auto& [name, p] : plan.members[u]) {
      s.layout.param_names.push_back(name);
      s.layout.shapes.push_back(p.sizes().vec());
      s.params.push_back(p);
      plan.from_host |= p.device() != device_;
    }
    s.plan = plan_flat(s.params);
    s.layout.numel = s.plan.numel;
    s.layout.padded_numel = padded_numel(std::max<int64_t>(s.layout.numel, 1), n);
    s.layout.shard_numel = s.layout.padded_numel / n;
  }
  // One staging buffer, the largest unit's, serves every unit in turn: a backend may keep a reference
  // to a collective's tensor for a while after the wait (Gloo's worker thread does), so a buffer of
  // its own per unit could leave two units' worth alive at once.
  int64_t largest = 0;
  for (const auto& s : units_) largest = std::max(largest, s.layout.padded_numel);
  auto staging = torch::empty({largest}, torch::TensorOptions().dtype(param_dtype_).device(device_));
  for (auto& s : units_) {
    auto flat = staging.narrow(0, 0, s.layout.padded_numel).zero_();
    for (size_t i = 0; i < s.params.size(); ++i)
      flat.narrow(0, s.plan.offsets[i], s.params[i].numel()).copy_(s.params[i].reshape(-1));
    if (broadcast) {
      std::vector<torch::Tensor> one{flat};
      pg_->broadcast(one, 0, "FullyShardedDataParallel: rank 0's weights (" + s.label() + ")");
    }
    s.shard = flat.narrow(0, pg_->rank() * s.layout.shard_numel, s.layout.shard_numel).to(torch::kFloat32).clone();
    s.shard.set_requires_grad(true);
    s.make_buffer(device_, dtypes_);  // the model's own memory for the unit's parameters goes here
    s.anchor = torch::empty({0}, torch::TensorOptions().device(device_)).requires_grad_(true);
    shards_.push_back(s.shard);
    layouts_.push_back(s.layout);
  }
  staging = torch::Tensor();
  // Buffers (a batch norm's statistics) are small: each whole on every rank's device, rank 0's.
  std::vector<torch::Tensor> buffers;
  for (auto& b : root_->buffers(true)) {
    if (b.device() != device_) b.set_data(b.to(device_));
    buffers.push_back(b);
  }
  if (broadcast && !buffers.empty())
    broadcast_coalesced(buffers, 0, *pg_, "FullyShardedDataParallel: rank 0's buffers");
  // The model's host memory, now freed, goes back to the kernel (the allocator's keep-freed policy,
  // when configure_process applied it, would otherwise hold it).
  if (plan.from_host && process_settings().keep_freed_host_memory) release_freed_host_memory();
}

// Gradient-ready hooks and the units' call sites.
void FullyShardedEngine::install_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    FsdpUnit& s = units_[u];
    s.hooks = std::make_unique<GradientHooks>(s.params, [this, u](size_t) {
      FsdpUnit& unit = units_[u];
      if (unit.grads_pending > 0 && --unit.grads_pending == 0) post_backward(u);
    });
    s.begin_pass();
    if (u == 0) {  // the root: marked as wrapped; a ddp::call on it is its plain forward
      s.interception = CallInterception(*root_, [](torch::nn::Module&, const std::vector<torch::Tensor>& args,
                                                   const ModuleForward& forward) { return forward(args); });
      continue;
    }
    s.interception =
        CallInterception(*s.module, [this, u](torch::nn::Module&, const std::vector<torch::Tensor>& args,
                                              const ModuleForward& forward) { return unit_forward(u, args, forward); });
  }
}

// ---- gather and reshard ---------------------------------------------------------------------

void FullyShardedEngine::start_gather(size_t u) { units_[u].start_gather(*pg_, dtypes_); }
void FullyShardedEngine::gather(size_t u) { units_[u].gather(*pg_, dtypes_); }
void FullyShardedEngine::reshard(size_t u) { units_[u].reshard(*pg_); }

// ---- forward --------------------------------------------------------------------------------

void FullyShardedEngine::begin_root_forward() {
  DDP_CHECK(!in_root_forward_, "FullyShardedDataParallel: forward called again inside its own forward",
            "call the wrapper once per step; inside the model's forward call units with ddp::call(unit, x)");
  in_root_forward_ = true;
  if (!order_.empty()) last_order_ = order_;
  order_.clear();
  gather(0);
}

torch::Tensor FullyShardedEngine::end_root_forward(torch::Tensor output) {
  in_root_forward_ = false;
  const bool backward_follows = output.defined() && output.requires_grad() && torch::GradMode::is_enabled();
  if (!backward_follows) {
    for (size_t u = 0; u < units_.size(); ++u) reshard(u);
    return output;
  }
  backward_queued_ = false;
  for (auto& s : units_) s.begin_pass();
  output.register_hook([this](const torch::Tensor&) {
    if (backward_queued_) return;
    backward_queued_ = true;
    units_[0].hooks->call_at_end_of_backward([this] { finish_backward(); });
    pre_backward(0);
  });
  return output;
}

void FullyShardedEngine::abandon_root_forward() noexcept {
  in_root_forward_ = false;
  try {
    for (size_t u = 0; u < units_.size(); ++u) reshard(u);
  } catch (...) {  // a failed all-gather: the group reports it at its next collective
  }
}

void FullyShardedEngine::explain_forward_failure(const c10::Error& error) const {
  const std::string what = error.what_without_backtrace();
  // LibTorch's words for a parameter whose storage is freed (a view of an ungathered unit's buffer).
  if (what.find("storage of size 0") == std::string::npos && what.find("data is not allocated") == std::string::npos)
    return;
  std::string skipped;
  for (size_t u = 1; u < units_.size(); ++u)
    if (std::find(order_.begin(), order_.end(), u) == order_.end())
      skipped += (skipped.empty() ? "" : ", ") + units_[u].layout.name;
  throw Error(
      "FullyShardedDataParallel: the model's forward read the parameters of a unit that is not gathered" +
          (skipped.empty() ? std::string() : " (not called through ddp::call in this forward: " + skipped + ")") +
          "; LibTorch said: " + what.substr(0, what.find('\n')),
      "inside the model's forward call each unit as ddp::call(unit, x), not unit->forward(x) or unit(x): "
      "that call site is where the wrapper gathers the unit");
}

torch::Tensor FullyShardedEngine::cast_input(const torch::Tensor& input) const {
  if (!options_.param_dtype || !input.defined() || !input.is_floating_point() || input.scalar_type() == dtypes_.compute)
    return input;
  return input.to(dtypes_.compute);
}

torch::Tensor FullyShardedEngine::unit_forward(size_t u, const std::vector<torch::Tensor>& args,
                                               const ModuleForward& forward) {
  FsdpUnit& s = units_[u];
  DDP_CHECK(in_root_forward_,
            "FullyShardedDataParallel: the unit " + s.layout.name + " was called outside the wrapped model's forward",
            "call the wrapper, model(x), not the plain module (net->forward(x), or model->forward(x), which is "
            "the module inside the wrapper): the wrapper gathers the units around their ddp::call sites");
  if (std::find(order_.begin(), order_.end(), u) == order_.end()) order_.push_back(u);
  gather(u);
  if (options_.prefetch) {  // the unit after this one in the previous pass
    const auto it = std::find(last_order_.begin(), last_order_.end(), u);
    if (it != last_order_.end() && it + 1 != last_order_.end()) start_gather(*(it + 1));
  }
  const bool grad = torch::GradMode::is_enabled();
  std::vector<torch::Tensor> cast;
  for (const auto& a : args) cast.push_back(cast_input(a));
  torch::Tensor output = options_.checkpoint_activations && grad
                             ? detail::checkpointed_call(forward, cast, s.anchor, [this, u] { pre_backward(u); })
                             : forward(cast);
  if (grad && output.requires_grad()) output.register_hook([this, u](const torch::Tensor&) { pre_backward(u); });
  if (options_.reshard_after_forward) reshard(u);
  return output;
}

// ---- backward -------------------------------------------------------------------------------

void FullyShardedEngine::pre_backward(size_t u) {
  gather(u);
  if (options_.prefetch && u != 0) {  // backward meets the units in reverse forward order
    const auto it = std::find(order_.begin(), order_.end(), u);
    if (it != order_.end() && it != order_.begin()) start_gather(*(it - 1));
  }
}

void FullyShardedEngine::post_backward(size_t u) {
  FsdpUnit& s = units_[u];
  if (sync_) {
    // One reduce-scatter in flight (FSDP2's): the previous unit's lands and frees its input first.
    finish_reduce_in_flight();
    s.start_reduce(*pg_, dtypes_);
    reducing_ = u;
    most_reduce_inputs_ = std::max(most_reduce_inputs_, units_holding_reduce_input());
  } else {
    s.accumulate_gradients(dtypes_);
  }
  reshard(u);
}

void FullyShardedEngine::finish_reduce_in_flight() {
  if (!reducing_) return;
  units_[*reducing_].finish_reduce();
  reducing_.reset();
}

void FullyShardedEngine::finish_backward() {
  // A unit some of whose parameters got no gradient this pass: its gradients are sent now, the
  // missing ones as zeros, in unit order (the same on every rank).
  for (size_t u = 0; u < units_.size(); ++u) {
    FsdpUnit& s = units_[u];
    if (s.reduced() == Reduced::kNo && s.grads_pending > 0 && s.grads_pending < s.params.size()) post_backward(u);
  }
  finish_reduce_in_flight();
  if (sync_) has_gradients_ = true;
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].begin_pass();
    reshard(u);
  }
  backward_queued_ = false;
}

}  // namespace ddp
