#include "ddp/fully_sharded.h"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "ddp/detail/checked_file.h"
#include "ddp/detail/engine_core.h"   // defines: broadcast_model_from_rank0
#include "ddp/detail/flat_buckets.h"  // defines: BucketPlan, plan_flat, padded_numel
#include "ddp/detail/gradient_hooks.h"
#include "ddp/detail/sharded_collectives.h"
#include "ddp/files.h"
#include "ddp/timeline.h"  // defines: record_collective

namespace ddp {
namespace {

// A gathered buffer's memory is released and taken again in place (its StorageImpl keeps its
// identity), so the module's parameters, which are views of it, and the tensors autograd saved
// from them, see the data again after the next gather: PyTorch's FSDP frees with
// untyped_storage().resize_(0) for the same reason.
void free_storage(const torch::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& t, size_t nbytes) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == nbytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

std::string unit_label(const FullyShardedUnit& unit) {
  return unit.name.empty() ? std::string("the root unit") : "unit " + unit.name;
}

}  // namespace

struct FsdpUnitState {
  FullyShardedUnit layout;
  torch::nn::Module* module = nullptr;  // null: the root unit
  std::vector<torch::Tensor> params;    // the module's parameters (views of `full` while gathered)
  BucketPlan plan;                      // each parameter's place in the flat buffer (flat_buckets.h)
  torch::Tensor shard;                  // [shard_numel], float32 leaf: what the optimizer steps on
  torch::Tensor full;                   // [padded_numel], compute dtype; storage freed when resharded
  torch::Tensor anchor;                 // checkpointing: an input that needs grad, so the unit's backward runs
  bool gathered = false;
  c10::intrusive_ptr<c10d::Work> gather_work;  // an all-gather in flight (prefetch)
  torch::Tensor gather_input;
  size_t grads_pending = 0;
  bool reduced = false;  // this pass's gradients sent (or the pass was no_sync)
  torch::Tensor reduce_input, reduce_output;
  ReduceScatter reduce;
  std::unique_ptr<GradientHooks> hooks;
  CallInterception interception;
};

struct FullyShardedEngine::Impl {
  std::vector<FsdpUnitState> units;
  std::vector<FullyShardedUnit> layouts;
  std::vector<torch::Tensor> shards;
  torch::Dtype param_dtype = torch::kFloat32;
  torch::Dtype compute_dtype = torch::kFloat32;
  torch::Dtype reduce_dtype = torch::kFloat32;
  bool in_root_forward = false;
  bool backward_queued = false;
  std::vector<size_t> order, last_order;  // units' forward order: this pass, the previous one
  std::unordered_map<size_t, size_t> position_in_order;
};

namespace {

// Recomputes a unit's forward in backward (activation checkpointing): forward runs without
// keeping activations; backward gathers the unit, reruns it with autograd on and backpropagates
// through it, which fills the parameters' gradients (and runs their gradient-ready hooks).
struct CheckpointState : torch::CustomClassHolder {
  ModuleForward forward;
  std::function<void()> before_backward;
  std::vector<bool> needs_grad;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<CheckpointState> state, at::TensorList inputs) {
    std::vector<torch::Tensor> args(inputs.begin(), inputs.end() - 1);  // the last one is the anchor
    ctx->save_for_backward(args);
    for (const auto& a : args) state->needs_grad.push_back(a.requires_grad());
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    torch::NoGradGuard no_grad;
    return {state->forward(args)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    state->before_backward();
    auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> args;
    for (size_t i = 0; i < saved.size(); ++i) args.push_back(saved[i].detach().requires_grad_(state->needs_grad[i]));
    torch::Tensor output;
    {
      torch::AutoGradMode grad_on(true);
      output = state->forward(args);
    }
    torch::autograd::backward({output}, {grad_outputs[0]});
    torch::autograd::variable_list grads{torch::Tensor()};  // the state
    for (const auto& a : args) grads.push_back(a.requires_grad() ? a.grad() : torch::Tensor());
    grads.push_back(torch::Tensor());  // the anchor
    return grads;
  }
};

}  // namespace

// ---- construction ---------------------------------------------------------------------------

FullyShardedEngine::FullyShardedEngine(std::shared_ptr<torch::nn::Module> root,
                                       std::vector<std::shared_ptr<torch::nn::Module>> units,
                                       std::shared_ptr<ProcessGroup> pg, FullyShardedOptions options)
    : root_(std::move(root)), pg_(std::move(pg)), options_(options), impl_(std::make_unique<Impl>()) {
  DDP_CHECK(root_ != nullptr, "FullyShardedDataParallel: no module given", "pass the model to wrap");
  DDP_CHECK(pg_ != nullptr, "FullyShardedDataParallel: no process group given", "pass init_process_group's group");
  auto& im = *impl_;
  const int64_t n = pg_->size();

  // Where each submodule sits in the root, by object.
  std::unordered_map<const torch::nn::Module*, std::string> path_of;
  for (const auto& item : root_->named_modules("", /*include_self=*/false)) path_of[item.value().get()] = item.key();
  std::vector<std::string> unit_paths;
  for (const auto& unit : units) {
    DDP_CHECK(unit != nullptr, "FullyShardedDataParallel: a unit is null", "pass submodules of the model as units");
    const auto it = path_of.find(unit.get());
    DDP_CHECK(it != path_of.end(),
              "FullyShardedDataParallel: the unit " + unit->name() + " is not a submodule of the model it wraps",
              "choose units among the model's submodules (e.g. model->blocks[i].ptr()), registered with "
              "register_module");
    DDP_CHECK(std::find(unit_paths.begin(), unit_paths.end(), it->second) == unit_paths.end(),
              "FullyShardedDataParallel: the unit " + it->second + " is given twice", "name each unit once");
    unit_paths.push_back(it->second);
  }
  for (size_t i = 0; i < unit_paths.size(); ++i)
    for (size_t j = 0; j < unit_paths.size(); ++j)
      DDP_CHECK(i == j || unit_paths[j].rfind(unit_paths[i] + ".", 0) != 0,
                "FullyShardedDataParallel: the unit " + unit_paths[j] + " lies inside the unit " + unit_paths[i],
                "choose units that do not nest (e.g. the blocks, not also their layers)");

  // Wrapped already? (Checked before anything changes: a second wrapper would re-point the parameters.)
  DDP_CHECK(!detail::find_call_interceptor(*root_),
            "FullyShardedDataParallel: " + root_->name() + " already has an interceptor (it is wrapped already)",
            "wrap each model once: destroy the first wrapper before wrapping it again");
  for (const auto& unit : units)
    DDP_CHECK(!detail::find_call_interceptor(*unit),
              "FullyShardedDataParallel: the unit " + path_of[unit.get()] +
                  " already has an interceptor (it is wrapped already)",
              "wrap each model once: destroy the first wrapper before wrapping it again");

  // Each parameter to its unit: the deepest unit whose path prefixes it; the rest to the root unit.
  const auto named = root_->named_parameters(/*recurse=*/true);
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> members(units.size() + 1);
  for (size_t u = 0; u < units.size(); ++u) {
    for (const auto& p : units[u]->named_parameters(true))
      members[u + 1].emplace_back(unit_paths[u] + "." + p.key(), p.value());
  }
  std::map<const c10::TensorImpl*, std::string> owner;  // parameter -> the unit that has it
  for (size_t u = 1; u < members.size(); ++u) {
    for (const auto& [name, p] : members[u]) {
      const auto [it, fresh] = owner.emplace(p.unsafeGetTensorImpl(), unit_paths[u - 1]);
      DDP_CHECK(fresh,
                "FullyShardedDataParallel: the parameter " + name + " is in two units, " + it->second + " and " +
                    unit_paths[u - 1],
                "tie weights only inside one unit: put the modules that share it in one unit, or leave them "
                "to the root unit");
    }
  }
  for (const auto& p : named) {
    if (!owner.count(p.value().unsafeGetTensorImpl())) members[0].emplace_back(p.key(), p.value());
  }
  // A module outside every unit that holds a unit's parameter (a weight tied across the boundary).
  auto inside_a_unit = [&](const std::string& path) {
    for (const auto& unit_path : unit_paths)
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
  for (const auto& p : named) {
    DDP_CHECK(p.value().is_floating_point(),
              "FullyShardedDataParallel: the parameter " + p.key() + " is not floating point",
              "keep only floating-point tensors as parameters (register others as buffers)");
  }
  im.param_dtype = named.is_empty() ? torch::kFloat32 : named.values()[0].scalar_type();
  for (const auto& p : named)
    DDP_CHECK(p.value().scalar_type() == im.param_dtype,
              "FullyShardedDataParallel: the parameters have more than one dtype (" + p.key() + ")",
              "give every parameter one dtype; choose the compute dtype with FullyShardedOptions::param_dtype");
  im.compute_dtype = options_.param_dtype.value_or(im.param_dtype);
  im.reduce_dtype = options_.reduce_dtype.value_or(im.compute_dtype);

  im.units.resize(members.size());
  for (size_t u = 0; u < members.size(); ++u) {
    FsdpUnitState& s = im.units[u];
    s.module = u == 0 ? nullptr : units[u - 1].get();
    s.layout.name = u == 0 ? "" : unit_paths[u - 1];
    for (const auto& [name, p] : members[u]) {
      s.layout.param_names.push_back(name);
      s.layout.shapes.push_back(p.sizes().vec());
      s.params.push_back(p);
    }
    s.plan = plan_flat(s.params);
    s.layout.numel = s.plan.numel;
    s.layout.padded_numel = padded_numel(std::max<int64_t>(s.layout.numel, 1), n);
    s.layout.shard_numel = s.layout.padded_numel / n;
  }

  // Every rank holds rank 0's model (checked, then broadcast: the engine core's, as DDP and ZeRO),
  // then each rank keeps its slice of each unit.
  if (options_.broadcast_from_rank0 && n > 1) {
    std::vector<std::string> names;
    std::vector<torch::Tensor> params, buffers;
    for (const auto& p : named) {
      names.push_back(p.key());
      params.push_back(p.value());
    }
    for (auto& b : root_->buffers(true)) buffers.push_back(b);
    broadcast_model_from_rank0(names, params, buffers, *pg_);
  }
  torch::NoGradGuard no_grad;
  const auto device = named.is_empty() ? pg_->device() : named.values()[0].device();
  for (size_t u = 0; u < im.units.size(); ++u) {
    FsdpUnitState& s = im.units[u];
    auto flat = torch::zeros({s.layout.padded_numel}, torch::TensorOptions().dtype(im.param_dtype).device(device));
    for (size_t i = 0; i < s.params.size(); ++i)
      flat.narrow(0, s.plan.offsets[i], s.params[i].numel()).copy_(s.params[i].reshape(-1));
    s.shard = flat.narrow(0, pg_->rank() * s.layout.shard_numel, s.layout.shard_numel).to(torch::kFloat32).clone();
    s.shard.set_requires_grad(true);
    s.full = torch::empty({s.layout.padded_numel}, torch::TensorOptions().dtype(im.compute_dtype).device(device));
    for (size_t i = 0; i < s.params.size(); ++i)
      s.params[i].set_data(s.full.narrow(0, s.plan.offsets[i], s.params[i].numel()).view(s.layout.shapes[i]));
    free_storage(s.full);
    s.anchor = torch::empty({0}, torch::TensorOptions().device(device)).requires_grad_(true);
    im.shards.push_back(s.shard);
    im.layouts.push_back(s.layout);
  }

  // Gradient-ready hooks and the units' call sites.
  for (size_t u = 0; u < im.units.size(); ++u) {
    FsdpUnitState& s = im.units[u];
    s.hooks = std::make_unique<GradientHooks>(s.params, [this, u](size_t) {
      FsdpUnitState& unit = impl_->units[u];
      if (unit.grads_pending > 0 && --unit.grads_pending == 0) post_backward(u);
    });
    s.grads_pending = s.params.size();
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

FullyShardedEngine::~FullyShardedEngine() = default;

const std::vector<FullyShardedUnit>& FullyShardedEngine::units() const { return impl_->layouts; }
const std::vector<torch::Tensor>& FullyShardedEngine::parameters() const { return impl_->shards; }

// ---- gather and reshard ---------------------------------------------------------------------

void FullyShardedEngine::start_gather(size_t u) {
  FsdpUnitState& s = impl_->units[u];
  if (s.gathered || s.gather_work) return;
  torch::NoGradGuard no_grad;
  allocate_storage(s.full, static_cast<size_t>(s.full.numel()) * s.full.element_size());
  s.gather_input = s.shard.detach().to(impl_->compute_dtype);
  if (pg_->size() == 1) {
    s.full.copy_(s.gather_input);
    s.gather_input = torch::Tensor();
    s.gathered = true;
    return;
  }
  s.gather_work = pg_->backend()._allgather_base(s.full, s.gather_input);
  record_collective(s.gather_work, "parameter all-gather (" + unit_label(s.layout) + ")",
                    s.full.numel() * static_cast<int64_t>(s.full.element_size()));  // timeline.h
}

void FullyShardedEngine::gather(size_t u) {
  FsdpUnitState& s = impl_->units[u];
  start_gather(u);
  if (s.gather_work) {
    pg_->wait(s.gather_work, "FullyShardedDataParallel: all-gather of " + unit_label(s.layout));
    s.gather_work.reset();
    s.gather_input = torch::Tensor();
    s.gathered = true;
  }
}

void FullyShardedEngine::reshard(size_t u) {
  FsdpUnitState& s = impl_->units[u];
  if (s.gather_work) gather(u);  // a prefetch in flight writes into the buffer: let it land first
  if (!s.gathered) return;
  free_storage(s.full);
  s.gathered = false;
}

// ---- forward --------------------------------------------------------------------------------

void FullyShardedEngine::begin_root_forward() {
  auto& im = *impl_;
  DDP_CHECK(!im.in_root_forward, "FullyShardedDataParallel: forward called again inside its own forward",
            "call the wrapper once per step; inside the model's forward call units with ddp::call");
  im.in_root_forward = true;
  if (!im.order.empty()) im.last_order = im.order;
  im.order.clear();
  im.position_in_order.clear();
  gather(0);
}

torch::Tensor FullyShardedEngine::end_root_forward(torch::Tensor output) {
  auto& im = *impl_;
  im.in_root_forward = false;
  const bool backward_follows = output.defined() && output.requires_grad() && torch::GradMode::is_enabled();
  if (!backward_follows) {
    for (size_t u = 0; u < im.units.size(); ++u) reshard(u);
    return output;
  }
  im.backward_queued = false;
  for (auto& s : im.units) {
    s.grads_pending = s.params.size();
    s.reduced = false;
  }
  output.register_hook([this](const torch::Tensor&) {
    if (impl_->backward_queued) return;
    impl_->backward_queued = true;
    impl_->units[0].hooks->call_at_end_of_backward([this] { finish_backward(); });
    pre_backward(0);
  });
  return output;
}

void FullyShardedEngine::abandon_root_forward() noexcept {
  impl_->in_root_forward = false;
  try {
    for (size_t u = 0; u < impl_->units.size(); ++u) reshard(u);
  } catch (...) {  // a failed all-gather: the group reports it at its next collective
  }
}

torch::Tensor FullyShardedEngine::cast_input(const torch::Tensor& input) const {
  if (!options_.param_dtype || !input.defined() || !input.is_floating_point() ||
      input.scalar_type() == impl_->compute_dtype)
    return input;
  return input.to(impl_->compute_dtype);
}

torch::Tensor FullyShardedEngine::unit_forward(size_t u, const std::vector<torch::Tensor>& args,
                                               const ModuleForward& forward) {
  auto& im = *impl_;
  FsdpUnitState& s = im.units[u];
  DDP_CHECK(im.in_root_forward,
            "FullyShardedDataParallel: the unit " + s.layout.name + " was called outside the wrapped model's forward",
            "call units only from inside the model's forward, through the FullyShardedDataParallel wrapper "
            "(model->forward(x) on the wrapper, not on the plain module)");
  if (!im.position_in_order.count(u)) {
    im.position_in_order[u] = im.order.size();
    im.order.push_back(u);
  }
  gather(u);
  if (options_.prefetch) {  // the unit after this one in the previous pass
    const auto it = std::find(im.last_order.begin(), im.last_order.end(), u);
    if (it != im.last_order.end() && it + 1 != im.last_order.end()) start_gather(*(it + 1));
  }
  const bool grad = torch::GradMode::is_enabled();
  std::vector<torch::Tensor> cast;
  for (const auto& a : args) cast.push_back(cast_input(a));
  torch::Tensor output;
  if (options_.checkpoint_activations && grad) {
    auto state = c10::make_intrusive<CheckpointState>();
    state->forward = forward;
    state->before_backward = [this, u] { pre_backward(u); };
    std::vector<torch::Tensor> inputs = cast;
    inputs.push_back(s.anchor);
    output = CheckpointFunction::apply(state, at::TensorList(inputs))[0];
  } else {
    output = forward(cast);
  }
  if (grad && output.requires_grad()) {
    output.register_hook([this, u](const torch::Tensor&) { pre_backward(u); });
  }
  if (options_.reshard_after_forward) reshard(u);
  return output;
}

// ---- backward -------------------------------------------------------------------------------

void FullyShardedEngine::pre_backward(size_t u) {
  auto& im = *impl_;
  gather(u);
  if (options_.prefetch && u != 0) {  // backward meets the units in reverse forward order
    const auto it = im.position_in_order.find(u);
    if (it != im.position_in_order.end() && it->second > 0) start_gather(im.order[it->second - 1]);
  }
}

void FullyShardedEngine::post_backward(size_t u) {
  auto& im = *impl_;
  FsdpUnitState& s = im.units[u];
  if (sync_) {
    torch::NoGradGuard no_grad;
    const int64_t n = pg_->size();
    s.reduce_input = torch::zeros({s.layout.padded_numel}, s.full.options().dtype(im.reduce_dtype));
    for (size_t i = 0; i < s.params.size(); ++i) {
      const auto& g = s.params[i].grad();
      if (g.defined()) s.reduce_input.narrow(0, s.plan.offsets[i], s.params[i].numel()).copy_(g.reshape(-1));
      s.params[i].mutable_grad().reset();
    }
    s.reduce_input.div_(static_cast<double>(n));
    s.reduce_output = torch::empty({s.layout.shard_numel}, s.reduce_input.options());
    s.reduce = ReduceScatter(*pg_, s.reduce_input, s.reduce_output, /*accumulate=*/false);
    record_collective(s.reduce.work(), "gradient reduce-scatter (" + unit_label(s.layout) + ")",
                      s.reduce_input.numel() * static_cast<int64_t>(s.reduce_input.element_size()));
    s.reduced = true;
  }
  reshard(u);
}

void FullyShardedEngine::finish_backward() {
  auto& im = *impl_;
  // A unit some of whose parameters got no gradient this pass: its gradients are sent now, the
  // missing ones as zeros, in unit order (the same on every rank).
  for (size_t u = 0; u < im.units.size(); ++u) {
    FsdpUnitState& s = im.units[u];
    if (!s.reduced && s.grads_pending > 0 && s.grads_pending < s.params.size()) post_backward(u);
  }
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < im.units.size(); ++u) {
    FsdpUnitState& s = im.units[u];
    if (s.reduce.active()) {
      s.reduce.finish("FullyShardedDataParallel: reduce-scatter of the gradients of " + unit_label(s.layout));
      auto& grad = s.shard.mutable_grad();
      if (grad.defined())
        grad.add_(s.reduce_output.to(torch::kFloat32));
      else
        grad = s.reduce_output.to(torch::kFloat32).clone();
      s.reduce_input = s.reduce_output = torch::Tensor();
    }
    s.grads_pending = s.params.size();
    s.reduced = false;
    reshard(u);
  }
  im.backward_queued = false;
}

void FullyShardedEngine::zero_grad(bool set_to_none) {
  for (auto& s : impl_->units) {
    auto& g = s.shard.mutable_grad();
    if (set_to_none)
      g.reset();
    else if (g.defined())
      g.zero_();
    for (auto& p : s.params) p.mutable_grad().reset();
  }
}

// ---- state dicts ----------------------------------------------------------------------------

std::vector<torch::Tensor> FullyShardedEngine::gather_full_float(size_t u) {
  FsdpUnitState& s = impl_->units[u];
  torch::NoGradGuard no_grad;
  auto flat = torch::empty({s.layout.padded_numel}, s.shard.options());
  flat.narrow(0, pg_->rank() * s.layout.shard_numel, s.layout.shard_numel).copy_(s.shard.detach());
  std::vector<torch::Tensor> flats{flat};
  all_gather_slices(*pg_, flats, "FullyShardedDataParallel: full state_dict of " + unit_label(s.layout));
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < s.params.size(); ++i)
    out.push_back(flat.narrow(0, s.plan.offsets[i], s.params[i].numel()).view(s.layout.shapes[i]).clone());
  return out;
}

TensorDict FullyShardedEngine::full_state_dict() {
  std::map<std::string, torch::Tensor> by_name;
  for (size_t u = 0; u < impl_->units.size(); ++u) {
    auto tensors = gather_full_float(u);
    for (size_t i = 0; i < tensors.size(); ++i) by_name[impl_->units[u].layout.param_names[i]] = tensors[i];
  }
  TensorDict out;
  if (pg_->rank() != 0) return out;
  for (const auto& p : root_->named_parameters(true)) out.emplace_back(p.key(), by_name.at(p.key()).cpu());
  for (const auto& b : root_->named_buffers(true)) out.emplace_back(b.key(), b.value().detach().cpu().clone());
  return out;
}

void FullyShardedEngine::load_full_state_dict(const TensorDict& state) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < impl_->units.size(); ++u) reshard(u);
  for (auto& s : impl_->units) {
    auto flat = torch::zeros({s.layout.padded_numel}, s.shard.options());
    for (size_t i = 0; i < s.params.size(); ++i) {
      const auto& name = s.layout.param_names[i];
      const auto it = by_name.find(name);
      DDP_CHECK(it != by_name.end(), "FullyShardedDataParallel: the state_dict has no " + name,
                "load a state_dict of this model (full_state_dict() writes one)");
      DDP_CHECK(it->second.sizes().vec() == s.layout.shapes[i],
                "FullyShardedDataParallel: " + name + " has another shape in the state_dict",
                "load a state_dict of this model (full_state_dict() writes one)");
      flat.narrow(0, s.plan.offsets[i], s.params[i].numel()).copy_(it->second.reshape(-1));
    }
    s.shard.detach().copy_(flat.narrow(0, pg_->rank() * s.layout.shard_numel, s.layout.shard_numel));
  }
  for (auto& b : root_->named_buffers(true)) {
    const auto it = by_name.find(b.key());
    DDP_CHECK(it != by_name.end(), "FullyShardedDataParallel: the state_dict has no buffer " + b.key(),
              "load a state_dict of this model (full_state_dict() writes one)");
    b.value().copy_(it->second);
  }
}

// ---- memory ---------------------------------------------------------------------------------

int64_t FullyShardedEngine::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : impl_->units) {
    bytes += s.shard.numel() * s.shard.element_size();
    if (s.shard.grad().defined()) bytes += s.shard.grad().numel() * s.shard.grad().element_size();
  }
  return bytes;
}

int64_t FullyShardedEngine::gathered_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : impl_->units) bytes += static_cast<int64_t>(s.full.storage().nbytes());
  return bytes;
}

int64_t FullyShardedEngine::full_gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : impl_->units)
    for (const auto& p : s.params)
      if (p.grad().defined()) bytes += p.grad().numel() * p.grad().element_size();
  return bytes;
}

// ---- the optimizer --------------------------------------------------------------------------

FullyShardedAdamW::FullyShardedAdamW(std::shared_ptr<FullyShardedEngine> engine, AdamOptions options)
    : engine_(std::move(engine)), options_(options) {
  for (const auto& shard : engine_->parameters()) {
    exp_avg_.push_back(torch::zeros_like(shard.detach()));
    exp_avg_sq_.push_back(torch::zeros_like(shard.detach()));
  }
}

double FullyShardedAdamW::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  const auto& shards = engine_->parameters();
  auto sum = torch::zeros({}, shards.front().options().dtype(torch::kFloat32));
  for (const auto& s : shards)
    if (s.grad().defined()) sum += s.grad().pow(2).sum();
  engine_->process_group().allreduce_sum(sum, "FullyShardedAdamW: gradient norm");
  const double norm = std::sqrt(sum.item<double>());
  if (max_norm > 0 && norm > max_norm) {
    const double factor = max_norm / (norm + 1e-6);
    for (const auto& s : shards)
      if (s.grad().defined()) s.grad().mul_(factor);
  }
  return norm;
}

void FullyShardedAdamW::step() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params, grads;
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;
  const auto& shards = engine_->parameters();
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].grad().defined()) continue;  // a unit unused in this step: skipped, as torch.optim does
    params.push_back(shards[i].detach());
    grads.push_back(shards[i].grad());
    exp_avg.push_back(exp_avg_[i]);
    exp_avg_sq.push_back(exp_avg_sq_[i]);
  }
  DDP_CHECK(!params.empty(), "FullyShardedAdamW: step() without gradients",
            "run a synchronized backward (outside no_sync()) after zero_grad() and before step()");
  ++steps_;
  adam_step(params, grads, exp_avg, exp_avg_sq, steps_, options_);
}

int64_t FullyShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : exp_avg_) bytes += t.numel() * t.element_size();
  for (const auto& t : exp_avg_sq_) bytes += t.numel() * t.element_size();
  return bytes;
}

// ---- sharded snapshots ----------------------------------------------------------------------

namespace {

constexpr std::string_view kShardMagic = "DDPFSDP1";
constexpr uint32_t kShardVersion = 1;

std::string shard_path(const std::string& path, int rank, int world) {
  return path + ".rank" + std::to_string(rank) + "-of-" + std::to_string(world);
}

std::string owner_text(const std::optional<SnapshotOwner>& owner) { return owner ? owner->label() : ""; }

}  // namespace

void save_fully_sharded_snapshot(const std::string& path, FullyShardedAdamW& optimizer, const TrainingState& state,
                                 const std::optional<SnapshotOwner>& owner) {
  auto& engine = optimizer.engine();
  auto& pg = engine.process_group();
  const auto& units = engine.units();
  TensorDict mine;
  for (size_t u = 0; u < units.size(); ++u) {
    mine.emplace_back("param." + std::to_string(u), engine.parameters()[u].detach().cpu());
    mine.emplace_back("exp_avg." + std::to_string(u), optimizer.exp_avg_shards()[u].cpu());
    mine.emplace_back("exp_avg_sq." + std::to_string(u), optimizer.exp_avg_sq_shards()[u].cpu());
  }
  if (pg.rank() == 0)
    for (const auto& b : engine.module().named_buffers(true)) mine.emplace_back("buffer." + b.key(), b.value().cpu());
  std::string error;
  try {
    write_checked_file(shard_path(path, pg.rank(), pg.size()), kShardMagic, kShardVersion, tensor_dict_to_bytes(mine),
                       "the snapshot path");
  } catch (const std::exception& e) {
    error = e.what();
  }
  auto failed = torch::tensor({error.empty() ? 0.0f : 1.0f});
  pg.allreduce_sum(failed, "FullyShardedDataParallel: snapshot shards written");
  DDP_CHECK(failed.item<float>() == 0,
            "FullyShardedDataParallel: a rank could not write its snapshot shard" +
                (error.empty() ? std::string() : ": " + error),
            "check that the snapshot's folder is writable and shared by all ranks");
  if (pg.rank() == 0) {
    nlohmann::json manifest;
    manifest["format"] = "ddp fully sharded snapshot";
    manifest["world_size"] = pg.size();
    manifest["epochs_run"] = state.epochs_run;
    manifest["step_in_epoch"] = state.step_in_epoch;
    manifest["steps_taken"] = optimizer.steps_taken();
    manifest["owner"] = owner_text(owner);
    for (const auto& unit : units)
      manifest["units"].push_back({{"name", unit.name}, {"numel", unit.numel}, {"params", unit.param_names}});
    write_file_atomically(path, manifest.dump(1), "the snapshot path");
  }
  pg.barrier("FullyShardedDataParallel: snapshot written");
}

std::optional<TrainingState> load_fully_sharded_snapshot(const std::string& path, FullyShardedAdamW& optimizer,
                                                         const std::optional<SnapshotOwner>& owner) {
  if (!path_exists(path)) return std::nullopt;
  auto& engine = optimizer.engine();
  auto& pg = engine.process_group();
  const auto& units = engine.units();
  nlohmann::json manifest;
  {
    std::ifstream in(path);
    try {
      manifest = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw Error(path + " is not a readable FSDP snapshot manifest: " + e.what(), "remove it or choose another path");
    }
  }
  DDP_CHECK(manifest.value("format", "") == "ddp fully sharded snapshot",
            path + " is not a snapshot of FullyShardedDataParallel",
            "choose the manifest save_fully_sharded_snapshot wrote");
  if (owner) {
    const std::string written = manifest.value("owner", "");
    DDP_CHECK(written == owner_text(owner),
              path + " was written by " + (written.empty() ? "an unnamed program" : written) + ", not by " +
                  owner_text(owner),
              "resume from a snapshot of this program, or choose another snapshot path");
  }
  DDP_CHECK(manifest["units"].size() == units.size(),
            path + " holds " + std::to_string(manifest["units"].size()) + " units, this model has " +
                std::to_string(units.size()),
            "resume with the same model and the same units");
  for (size_t u = 0; u < units.size(); ++u) {
    DDP_CHECK(manifest["units"][u]["params"].get<std::vector<std::string>>() == units[u].param_names &&
                  manifest["units"][u]["numel"].get<int64_t>() == units[u].numel,
              path + ": unit " + std::to_string(u) + " (" + units[u].name + ") differs from this model's",
              "resume with the same model and the same units");
  }
  const int saved_world = manifest["world_size"].get<int>();
  auto read_shard = [&](int rank) {
    const auto file = shard_path(path, rank, saved_world);
    auto payload = read_checked_file(file, kShardMagic, kShardVersion, "FSDP snapshot shard");
    DDP_CHECK(payload.has_value(), "the snapshot shard " + file + " is missing",
              "keep all shards next to the manifest (a folder all ranks share)");
    auto dict = tensor_dict_from_bytes(payload->bytes, file);
    return std::map<std::string, torch::Tensor>(dict.begin(), dict.end());
  };
  std::vector<std::map<std::string, torch::Tensor>> shards;
  if (saved_world == pg.size()) {
    shards.push_back(read_shard(pg.rank()));
  } else {
    for (int r = 0; r < saved_world; ++r) shards.push_back(read_shard(r));
  }
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) {
    const auto key = std::to_string(u);
    auto take = [&](const std::string& kind, torch::Tensor dest) {
      if (saved_world == pg.size()) {
        dest.copy_(shards[0].at(kind + "." + key));
        return;
      }
      std::vector<torch::Tensor> pieces;
      for (auto& s : shards) pieces.push_back(s.at(kind + "." + key));
      auto all = torch::cat(pieces).narrow(0, 0, units[u].numel);
      auto flat = torch::zeros({units[u].padded_numel}, all.options());
      flat.narrow(0, 0, units[u].numel).copy_(all);
      dest.copy_(flat.narrow(0, pg.rank() * units[u].shard_numel, units[u].shard_numel));
    };
    take("param", engine.parameters()[u].detach());
    take("exp_avg", optimizer.exp_avg_shards()[u]);
    take("exp_avg_sq", optimizer.exp_avg_sq_shards()[u]);
  }
  const auto& rank0 = saved_world == pg.size() && pg.rank() != 0 ? read_shard(0) : shards[0];
  for (auto& b : engine.module().named_buffers(true)) {
    const auto it = rank0.find("buffer." + b.key());
    DDP_CHECK(it != rank0.end(), path + " has no buffer " + b.key(), "resume with the same model");
    b.value().copy_(it->second);
  }
  optimizer.set_steps_taken(manifest["steps_taken"].get<int64_t>());
  TrainingState state;
  state.epochs_run = manifest["epochs_run"].get<int64_t>();
  state.step_in_epoch = manifest["step_in_epoch"].get<int64_t>();
  state.world_size = saved_world;
  if (saved_world != pg.size()) state.step_in_epoch = 0;  // the data shards differ: resume at the epoch's start
  pg.barrier("FullyShardedDataParallel: snapshot loaded");
  return state;
}

}  // namespace ddp
