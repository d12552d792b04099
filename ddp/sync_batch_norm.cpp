#include "ddp/sync_batch_norm.h"

#include <ATen/OpMathType.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/error.h"

namespace ddp {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels from forward to backward in the context's saved data.
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(std::shared_ptr<ProcessGroup> g) : pg(std::move(g)) {}
  std::shared_ptr<ProcessGroup> pg;
};

// Every dimension but the channels (1).
std::vector<int64_t> reduce_dims(const Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector [C] shaped to broadcast against the input [N, C, ...].
Tensor per_channel(const Tensor& v, const Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}

struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  // Optional tensors where PyTorch passes None: autograd takes an undefined Tensor argument for a
  // variable (and fails on it), an empty optional for no variable.
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const std::optional<Tensor>& weight_arg,
                        const std::optional<Tensor>& bias_arg, const std::optional<Tensor>& running_mean_arg,
                        const std::optional<Tensor>& running_var_arg, double eps, double momentum,
                        const std::shared_ptr<ProcessGroup>& pg) {
    const Tensor weight = weight_arg.value_or(Tensor()), bias = bias_arg.value_or(Tensor());
    const Tensor running_mean = running_mean_arg.value_or(Tensor()), running_var = running_var_arg.value_or(Tensor());
    const int64_t channels = input.size(1);
    const int64_t local_count = input.numel() / channels;
    // The statistics in the input's "op math" type (float for half and bfloat16, as PyTorch's
    // kernels); exchanged and combined in float64 (2C + 1 numbers per rank).
    const auto stat_type = at::toOpMathType(input.scalar_type());
    const auto wide = input.options().dtype(torch::kFloat64);
    const auto dims = reduce_dims(input);
    Tensor mine;
    if (local_count > 0) {
      auto [var, mean] = at::var_mean(input.to(stat_type), dims, /*correction=*/0, /*keepdim=*/false);
      mine = torch::cat({mean.to(torch::kFloat64), var.to(torch::kFloat64) * static_cast<double>(local_count),
                         torch::full({1}, static_cast<double>(local_count), wide)});
    } else {
      // An empty batch still takes part (the others wait for it) and weighs nothing.
      mine = torch::zeros({2 * channels + 1}, wide);
    }
    // All-gather, not all-reduce: the means combine with the counts (uneven batches). Into one
    // tensor, row r from rank r (allgather_into_tensor: NCCL gathers in place, no copies out).
    // Flat: Gloo's cuts the output into world-size chunks along its first dimension.
    Tensor gathered = torch::empty({pg->size() * (2 * channels + 1)}, wide);
    auto work = pg->backend()._allgather_base(gathered, mine);
    pg->wait(work, "SyncBatchNorm's statistics (all-gather of counts, means and squared deviations)");
    const Tensor all = gathered.view({pg->size(), 2 * channels + 1});  // [world, 2C + 1]
    const Tensor means = all.narrow(1, 0, channels);                   // [world, C]
    const Tensor squares = all.narrow(1, channels, channels);          // sum of (x - rank's mean)^2
    const Tensor counts = all.narrow(1, 2 * channels, 1);              // [world, 1]
    const Tensor n = counts.sum();                                     // all ranks' samples per channel
    const Tensor mean = (means * counts).sum(0) / n;
    // Chan et al.'s parallel variance: each rank's squared deviations, plus its count times the
    // squared distance of its mean from the global one. Biased (/ n), as batch norm normalises.
    const Tensor var = (squares + counts * (means - mean).square()).sum(0) / n;
    const Tensor invstd = (var + eps).rsqrt();
    if (running_mean.defined()) running_mean.mul_(1 - momentum).add_((mean * momentum).to(running_mean.scalar_type()));
    if (running_var.defined())
      running_var.mul_(1 - momentum).add_((var * (n / (n - 1)) * momentum).to(running_var.scalar_type()));

    const Tensor mean_s = mean.to(stat_type), invstd_s = invstd.to(stat_type);
    Tensor out = (input.to(stat_type) - per_channel(mean_s, input)) * per_channel(invstd_s, input);
    if (weight.defined()) out = out * per_channel(weight.to(stat_type), input);
    if (bias.defined()) out = out + per_channel(bias.to(stat_type), input);

    ctx->save_for_backward({input, weight, mean_s, invstd_s, n.to(stat_type)});
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(pg));
    return out.to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &n = saved[4];
    const auto pg = c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule())->pg;
    const auto stat_type = mean.scalar_type();
    const auto dims = reduce_dims(input);
    const Tensor dy = grads[0].to(stat_type);
    const Tensor xmu = input.to(stat_type) - per_channel(mean, input);
    // PyTorch's batch_norm_backward_reduce: per channel sum(dy) and sum(dy * (x - mean)).
    Tensor sum_dy = dy.sum(dims);
    Tensor sum_dy_xmu = (dy * xmu).sum(dims);
    Tensor grad_input, grad_weight, grad_bias;
    // (needs_input_grad counts the tensors passed: weight and bias are 1 and 2 when affine, both
    // absent otherwise.)
    if (weight.defined() && ctx->needs_input_grad(1)) grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
    if (weight.defined() && ctx->needs_input_grad(2)) grad_bias = sum_dy.to(weight.scalar_type());
    if (ctx->needs_input_grad(0)) {
      // Global sums (an empty batch sends zeros: the others wait for it).
      const int64_t channels = sum_dy.numel();
      std::vector<Tensor> combined{torch::cat({sum_dy, sum_dy_xmu})};
      auto work = pg->allreduce_sum_async(combined);
      pg->wait(work, "SyncBatchNorm's backward (all-reduce of sum(dy) and sum(dy * (x - mean)))");
      sum_dy = combined[0].narrow(0, 0, channels);
      sum_dy_xmu = combined[0].narrow(0, channels, channels);
      // PyTorch's batch_norm_backward_elemt.
      const Tensor scale = weight.defined() ? invstd * weight.to(stat_type) : invstd;
      grad_input = (dy - per_channel(sum_dy / n, input) - xmu * per_channel(invstd.square() * sum_dy_xmu / n, input)) *
                   per_channel(scale, input);
      grad_input = grad_input.to(input.scalar_type());
    }
    return {grad_input, grad_weight, grad_bias, Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

bool is_torch_batchnorm(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m) || dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m);
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_, std::shared_ptr<ProcessGroup> pg)
    : options(options_), pg_(std::move(pg)) {
  SyncBatchNormImpl::reset();
}

void SyncBatchNormImpl::register_state(Tensor w, Tensor b, Tensor mean, Tensor var, Tensor count) {
  // Registered as torch::nn::BatchNorm registers them, in the same order: the same state_dict.
  // (A shared parameter keeps its requires_grad: a frozen BatchNorm stays frozen.)
  const bool w_grad = w.defined() && w.requires_grad(), b_grad = b.defined() && b.requires_grad();
  weight = register_parameter("weight", std::move(w), /*requires_grad=*/w_grad);
  bias = register_parameter("bias", std::move(b), /*requires_grad=*/b_grad);
  running_mean = register_buffer("running_mean", std::move(mean));
  running_var = register_buffer("running_var", std::move(var));
  num_batches_tracked = register_buffer("num_batches_tracked", std::move(count));
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features();
  Tensor w, b, mean, var, count;
  if (options.affine()) {
    w = torch::ones({c}).requires_grad_(true);
    b = torch::zeros({c}).requires_grad_(true);
  }
  if (options.track_running_stats()) {
    mean = torch::zeros({c});
    var = torch::ones({c});
    count = torch::tensor(0, torch::dtype(torch::kLong));
  }
  register_state(w, b, mean, var, count);
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  torch::NoGradGuard no_grad;
  weight.fill_(1);
  bias.zero_();
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "ddp::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum().has_value())
    stream << options.momentum().value();
  else
    stream << "None";
  stream << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats()
         << ", world=" << (pg_ ? std::to_string(pg_->size()) : std::string("none")) << ')';
}

Tensor SyncBatchNormImpl::forward(const Tensor& input) {
  DDP_CHECK(input.dim() >= 2,
            "SyncBatchNorm expects an input [N, C, ...] of at least 2 dimensions, got " + std::to_string(input.dim()),
            "pass the batch with its channels in dimension 1");
  DDP_CHECK(input.size(1) == options.num_features(),
            "SyncBatchNorm(" + std::to_string(options.num_features()) + ") got " + std::to_string(input.size(1)) +
                " channels (input " + c10::str(input.sizes()) + ")",
            "construct it with the channel count of the layer before it");
  // As PyTorch's _BatchNorm / SyncBatchNorm forward (torch/nn/modules/batchnorm.py).
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
    if (!options.momentum().has_value()) factor = 1.0 / num_batches_tracked.item<double>();
  }
  const bool batch_stats = is_training() || (!running_mean.defined() && !running_var.defined());
  const bool use_running = !is_training() || options.track_running_stats();
  const Tensor mean = use_running ? running_mean : Tensor();
  const Tensor var = use_running ? running_var : Tensor();
  if (!(batch_stats && is_training() && pg_ && !pg_->skips_collectives()))
    return torch::nn::functional::detail::batch_norm(input, mean, var, weight, bias, batch_stats, factor,
                                                     options.eps());
  auto maybe = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  return SyncBatchNormFunction::apply(input, maybe(weight), maybe(bias), maybe(mean), maybe(var), options.eps(), factor,
                                      pg_);
}

std::shared_ptr<SyncBatchNormImpl> SyncBatchNormImpl::sharing_state_of(const torch::nn::Module& from,
                                                                       std::shared_ptr<ProcessGroup> pg) {
  auto share = [&](const auto* bn) {
    auto out = std::shared_ptr<SyncBatchNormImpl>(new SyncBatchNormImpl(ShareTag{}, bn->options, std::move(pg)));
    out->register_state(bn->weight, bn->bias, bn->running_mean, bn->running_var, bn->num_batches_tracked);
    out->train(bn->is_training());
    return out;
  };
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&from)) return share(bn);
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&from)) return share(bn);
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&from)) return share(bn);
  return nullptr;
}

namespace {

// A torch::nn::BatchNorm to replace: who holds it and where.
struct Replacement {
  torch::nn::Module* parent;
  std::string name;  // its name in the parent's registry
  std::string path;  // e.g. "block1.bn"
  std::shared_ptr<torch::nn::Module> bn;
  enum Kind { kSequential, kModuleList, kModuleDict, kRegistryOnly } kind;
  size_t slot = 0;  // its place in a Sequential or ModuleList
};

std::string kind_name(Replacement::Kind k) {
  switch (k) {
    case Replacement::kSequential: return "Sequential";
    case Replacement::kModuleList: return "ModuleList";
    case Replacement::kModuleDict: return "ModuleDict";
    default: return "module";
  }
}

// The BatchNorm layers of `module` and where each sits (every ranks' copies: none is dropped).
std::vector<Replacement> find_batchnorms(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::nn::Module*>> parents{{"", &module}};
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    parents.emplace_back(item.key(), item.value().get());
  std::vector<Replacement> found;
  for (const auto& [prefix, parent] : parents) {
    for (const auto& child : parent->named_children()) {
      if (!is_torch_batchnorm(*child.value())) continue;
      Replacement r{parent, child.key(), prefix.empty() ? child.key() : prefix + "." + child.key(), child.value(),
                    Replacement::kRegistryOnly};
      if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(parent)) {
        r.kind = Replacement::kSequential;
        for (auto it = seq->begin(); it != seq->end(); ++it)
          if (it->ptr().get() == r.bn.get()) r.slot = static_cast<size_t>(it - seq->begin());
      } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(parent)) {
        r.kind = Replacement::kModuleList;
        for (auto it = list->begin(); it != list->end(); ++it)
          if (it->get() == r.bn.get()) r.slot = static_cast<size_t>(it - list->begin());
      } else if (dynamic_cast<torch::nn::ModuleDictImpl*>(parent)) {
        r.kind = Replacement::kModuleDict;
      }
      found.push_back(std::move(r));
    }
  }
  return found;
}

}  // namespace

size_t convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<ProcessGroup> pg) {
  DDP_CHECK(!is_torch_batchnorm(module), "convert_sync_batchnorm: the module itself is a torch::nn::BatchNorm",
            "a module cannot replace itself in C++: construct a ddp::SyncBatchNorm in its place, or convert the "
            "module that holds it");
  auto found = find_batchnorms(module);
  // Who else holds each one: its parent's registry, the container's slot, and `found` hold one
  // reference each; any more is a typed member (or a variable) that would keep calling the old
  // module. Checked for all before any is replaced: on an error nothing has changed.
  std::string refused;
  for (const auto& r : found) {
    const long expected = r.kind == Replacement::kRegistryOnly ? 2 : 3;
    if (r.bn.use_count() <= expected) continue;
    refused += (refused.empty() ? "'" : ", '") + r.path + "' (" + r.bn->name() +
               (r.kind == Replacement::kRegistryOnly ? " held by a member of " + r.parent->name()
                                                     : " in a " + kind_name(r.kind) + ", also held outside it") +
               ")";
  }
  DDP_CHECK(refused.empty(),
            "convert_sync_batchnorm cannot replace these BatchNorm layers: " + refused +
                ". C++ cannot swap what a member or variable points at, which would go on calling the old, unsynced "
                "layer; nothing was converted",
            "declare such a member as ddp::SyncBatchNorm (construct it with ddp::SyncBatchNorm(channels)), or hold "
            "the BatchNorm only in a torch::nn::Sequential, ModuleList or ModuleDict");
  for (auto& r : found) {
    auto sync = SyncBatchNormImpl::sharing_state_of(*r.bn, pg);
    switch (r.kind) {
      case Replacement::kSequential:
        *(static_cast<torch::nn::SequentialImpl*>(r.parent)->begin() + static_cast<std::ptrdiff_t>(r.slot)) =
            torch::nn::AnyModule(sync);
        break;
      case Replacement::kModuleList:
        *(static_cast<torch::nn::ModuleListImpl*>(r.parent)->begin() + static_cast<std::ptrdiff_t>(r.slot)) = sync;
        break;
      case Replacement::kModuleDict:
        static_cast<torch::nn::ModuleDictImpl*>(r.parent)->update({{r.name, sync}});  // slot and registration
        continue;
      case Replacement::kRegistryOnly: break;
    }
    r.parent->replace_module(r.name, sync);
  }
  size_t count = 0;
  for (const auto& m : module.modules(/*include_self=*/false))
    if (auto* s = dynamic_cast<SyncBatchNormImpl*>(m.get())) {
      s->set_process_group(pg);
      ++count;
    }
  if (auto* self = dynamic_cast<SyncBatchNormImpl*>(&module)) {
    self->set_process_group(pg);
    ++count;
  }
  return count;
}

void give_group_to_sync_batchnorm(torch::nn::Module& module, const std::shared_ptr<ProcessGroup>& pg) {
  if (auto* self = dynamic_cast<SyncBatchNormImpl*>(&module); self && !self->process_group())
    self->set_process_group(pg);
  for (const auto& m : module.modules(/*include_self=*/false))
    if (auto* s = dynamic_cast<SyncBatchNormImpl*>(m.get()); s && !s->process_group()) s->set_process_group(pg);
}

}  // namespace ddp
