// defines: DistributedDataParallel — PyTorch's DDP for any torch::nn::Module, in C++.
//   * At construction, parameters and buffers are broadcast from rank 0 (ranks may start apart).
//   * The forward is ddp_model(x) or ddp_model.forward(x), as PyTorch's ddp_model(x): with
//     broadcast_buffers (the default) it first broadcasts rank 0's buffers (BatchNorm's running
//     statistics) when PyTorch would (forward_sync.h). ddp_model->forward(x) reaches the plain
//     module and skips that; the next backward fails, naming the fix, if the skip lost something
//     (a buffer changed). SyncBatchNorm layers without a process group get this one.
//   * During backward, each parameter's gradient accumulator fires a hook once .grad is final;
//     when a bucket (~bucket_mb; the first 1 MiB, as PyTorch) is complete its allreduce starts at
//     once, in bucket order, so communication overlaps the rest of backward. A callback at the
//     end of backward waits for all buckets and points each .grad at its averaged slice of the
//     bucket (PyTorch's gradient_as_bucket_view: no copy back) before backward() returns.
//     At world size 1 the allreduce (the identity) is not sent, unless the group keeps it
//     (ProcessGroupOptions::collectives_at_world_size_1); everything else runs as usual.
//   * bf16_compress: each bucket is sent as bfloat16 and summed in bfloat16 (PyTorch's
//     bf16_compress_hook, comm_hooks.h): half the bytes on the wire, gradients rounded to bfloat16.
//   * no_sync() skips the allreduce for gradient accumulation; the next synced backward averages
//     the accumulated gradients. set_requires_gradient_sync(false) does the same until it is set
//     to true again (FSDP2's name; no_sync.h).
//   * A parameter without a gradient is an error naming it. With find_unused_parameters it counts
//     as zero on this rank (its accumulated .grad, if any, still counts); a parameter that no
//     rank has a gradient for keeps .grad undefined, so the optimizer leaves it alone (PyTorch).
//     Which ones have a gradient anywhere is summed over the ranks alongside the buckets; as in
//     PyTorch, the host reads that sum (and so waits for it) only when a parameter had none here.
//   * TensorDataParallel is the same engine over a list of parameter tensors that belong to no
//     torch::nn::Module (what a binding to LibTorch holds): the same buckets, hooks and overlap.
//   * Ranks with different numbers of batches: train inside a ddp::Join (join.h, PyTorch's Join).
//   * An exception inside backward (an error in a hook, out of memory) abandons that pass: the next
//     backward starts afresh, or, if part of the gradients had already been sent, raises an error
//     that says the ranks are out of step (they would otherwise average different batches).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/detail/bucket_schedule.h"  // defines: BucketSchedule
#include "ddp/detail/engine_core.h"      // defines: EngineCore, BucketStrategy
#include "ddp/detail/forward_sync.h"
#include "ddp/joinable.h"       // defines: Joinable, JoinHook (what ddp::Join uses)
#include "ddp/module_holder.h"  // defines: ModuleImpl, HolderOf (a holder or an ...Impl)
#include "ddp/no_sync.h"        // defines: NoSync (no_sync()'s guard)
#include "ddp/process_group.h"

namespace ddp {

// How DistributedDataParallel and TensorDataParallel bucket and check the gradients.
struct DdpOptions {
  double bucket_mb = 25;  // as PyTorch's bucket_cap_mb
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // at construction and before forwards (PyTorch's default)
  bool bf16_compress = false;     // PyTorch's bf16_compress_hook: buckets travel as bfloat16
};

// The engine behind DistributedDataParallel and TensorDataParallel (no template: compiled once): the
// engine core (engine_core.h) with DDP's strategy, each bucket allreduced as it is.
class GradientReducer : private BucketStrategy {
 public:
  // The module's parameters that require a gradient; its buffers too if options.broadcast_buffers.
  GradientReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg, DdpOptions options);
  // `params`: leaf tensors that require a gradient, each once, in the order a module would register
  // them (buckets are filled last one first); `buffers` are only broadcast from rank 0.
  GradientReducer(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> pg, DdpOptions options,
                  const std::vector<torch::Tensor>& buffers = {});
  ~GradientReducer() override;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  BucketSchedule& schedule() { return core_->schedule(); }  // no_sync() and the backward pass's state
  size_t bucket_count() const { return core_->buckets().size(); }

  // For Join (join.h). Called at the start of every synced backward, before any bucket is sent.
  void set_before_sync(std::function<void()> f) { before_sync_ = std::move(f); }
  // A rank with no batch left matches one synced backward of the others: every bucket's allreduce
  // (and the used-parameter one) in order, with zeros, waited for. Leaves .grad as the others' average.
  void shadow_backward();
  ProcessGroup& process_group() { return core_->process_group(); }

 private:
  void set_up(const std::vector<torch::Tensor>& buffers);  // broadcast, buckets, schedule
  // BucketStrategy: the schedule's steps (bucket_schedule.h).
  void start() override;
  void launch(size_t bucket) override;
  void wait_for_sent(size_t sent, bool interrupted) override;
  void finish() override;
  void wait_for_bucket(size_t bucket, const std::string& what);  // and bf16_compress's cast back
  void point_grads_at_buckets();                                 // skips the parameters marked in keep_undefined_

  std::shared_ptr<torch::nn::Module> module_;  // none for TensorDataParallel
  DdpOptions options_;
  std::vector<torch::Tensor> wire_;       // bf16_compress: each bucket as it is sent
  std::vector<char> keep_undefined_;      // find_unused_parameters: no rank has a gradient for it
  torch::Tensor used_here_;               // find_unused_parameters: 1 where this rank has a gradient (CPU)...
  torch::Tensor used_anywhere_;           // ...and its sum over ranks (on the parameters' device)
  std::vector<torch::Tensor> used_list_;  // {used_anywhere_}: what the allreduce takes
  std::function<void()> before_sync_;     // Join's flag, while a Join lives
  // Last: destroyed first, so no hook runs on a half-gone reducer.
  std::unique_ptr<EngineCore> core_;
};

// DDP's join hook (joinable.h): a joined rank matches the others' synced backward passes (every
// bucket's allreduce, with zeros) and their buffer broadcasts (`forward`, when the forwards
// broadcast buffers), and at the end takes the last joiner's parameters and buffers of `module`.
std::unique_ptr<JoinHook> make_ddp_join_hook(GradientReducer& reducer, ForwardSync* forward,
                                             std::shared_ptr<torch::nn::Module> module);

// DDP for a torch::nn::Module (its holder or its shared_ptr): construct it on every rank with the
// same model, then train the module as usual; loss.backward() averages the gradients over the ranks.
// M is the module (NetImpl, held by std::shared_ptr<NetImpl>) or its LibTorch holder
// (torch::nn::Sequential, a TORCH_MODULE(Net)); either is passed: net or net.ptr() (module_holder.h).
// Ranks with different numbers of batches: inside a ddp::Join (join.h), through Joinable.
template <typename M>
class DistributedDataParallel : public Joinable {
  static_assert(check_module_type<M>());

 public:
  using Impl = WrappedModule<M>;  // the module itself: what -> and module() give

  // Collective: every rank calls it with the same model (checked), which then holds rank 0's weights.
  // forward_ before reducer_: its gradient hooks run first (its check comes before any gradient is sent).
  DistributedDataParallel(std::shared_ptr<Impl> module, std::shared_ptr<ProcessGroup> pg, DdpOptions options = {})
      : module_(std::move(module)),
        forward_(std::make_unique<ForwardSync>(module_, pg, options.broadcast_buffers)),
        reducer_(std::make_unique<GradientReducer>(module_, std::move(pg), options)) {}
  template <HolderOf<Impl> H>
  DistributedDataParallel(const H& holder, std::shared_ptr<ProcessGroup> pg, DdpOptions options = {})
      : DistributedDataParallel(holder.ptr(), std::move(pg), options) {}

  // The module's forward with DDP's work around it (PyTorch's DistributedDataParallel.forward).
  template <typename... Args>
  auto forward(Args&&... args) -> decltype(std::declval<Impl&>().forward(std::forward<Args>(args)...)) {
    forward_->before_forward();
    decltype(auto) out = module_->forward(std::forward<Args>(args)...);
    forward_->after_forward(reducer_->schedule().requires_gradient_sync());
    return out;
  }
  template <typename... Args>
  auto operator()(Args&&... args) -> decltype(std::declval<Impl&>().forward(std::forward<Args>(args)...)) {
    return forward(std::forward<Args>(args)...);
  }
  // Rank 0's buffers to every rank now (all ranks call it), e.g. before an evaluation through ->.
  void sync_buffers() { forward_->broadcast_buffers(); }

  Impl* operator->() const { return module_.get(); }               // the plain module: parameters(), train(), ...
  const std::shared_ptr<Impl>& module() const { return module_; }  // for checkpoints: a plain module
  size_t bucket_count() const { return reducer_->bucket_count(); }
  // Whether forwards through the wrapper broadcast rank 0's buffers (broadcast_buffers and buffers).
  bool broadcasts_buffers() const { return forward_->broadcasts_buffers(); }
  // The streams DDP's gradient hooks run on (on a GPU: the stream current when it was built), for
  // CaptureContext::gradient_streams: a CUDA graph captures the step only on that stream.
  std::vector<c10::Stream> gradient_streams() const {
    auto out = forward_->gradient_streams();
    for (const auto& s : reducer_->schedule().gradient_streams()) out.push_back(s);
    return out;
  }

  // Joinable (joinable.h), for ddp::Join.
  ProcessGroup& join_process_group() override { return reducer_->process_group(); }
  std::unique_ptr<JoinHook> join_hook() override {
    return make_ddp_join_hook(*reducer_, broadcasts_buffers() ? forward_.get() : nullptr, module_);
  }
  std::string join_name() const override { return "DistributedDataParallel"; }

  // Gradient accumulation (no_sync.h): backward only accumulates locally while a NoSync lives, or
  // while requires_gradient_sync() is false.
  using NoSync = ddp::NoSync;
  [[nodiscard]] NoSync no_sync() { return NoSync(reducer_->schedule()); }
  void set_requires_gradient_sync(bool on) { reducer_->schedule().set_requires_gradient_sync(on); }
  bool requires_gradient_sync() const { return reducer_->schedule().requires_gradient_sync(); }

 private:
  std::shared_ptr<Impl> module_;
  std::unique_ptr<ForwardSync> forward_;
  std::unique_ptr<GradientReducer> reducer_;
};
// DistributedDataParallel(net, pg): DistributedDataParallel<Net> for a holder, <NetImpl> for a shared_ptr.
template <ModuleHolderType H>
DistributedDataParallel(const H&, std::shared_ptr<ProcessGroup>, DdpOptions = {}) -> DistributedDataParallel<H>;
template <typename T>
DistributedDataParallel(std::shared_ptr<T>, std::shared_ptr<ProcessGroup>, DdpOptions = {})
    -> DistributedDataParallel<T>;

// DDP over a list of parameter tensors, for code that holds tensors rather than a torch::nn::Module
// (a binding to LibTorch from Java, Rust, C#, Ruby): every rank constructs it with the same list
// (same count, shapes and order: checked), which gets rank 0's values; then loss.backward() on any
// graph that reaches them averages their gradients over the ranks, as DistributedDataParallel does.
//   std::vector<torch::Tensor> params{w, b};  // leaves with requires_grad
//   ddp::TensorDataParallel ddp(params, pg);
//   torch::optim::SGD optimizer(params, 0.05);
class TensorDataParallel {
 public:
  // `params`: leaf tensors that require a gradient, each once (else an error naming the fix);
  // `buffers`: tensors without gradients (running statistics) that get rank 0's values too.
  TensorDataParallel(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> pg, DdpOptions options = {},
                     const std::vector<torch::Tensor>& buffers = {})
      : params_(params),
        reducer_(std::make_unique<GradientReducer>(std::move(params), std::move(pg), options, buffers)) {}

  const std::vector<torch::Tensor>& parameters() const { return params_; }  // what the optimizer takes
  size_t bucket_count() const { return reducer_->bucket_count(); }
  // Gradient accumulation, as DistributedDataParallel's (no_sync.h).
  [[nodiscard]] NoSync no_sync() { return NoSync(reducer_->schedule()); }
  void set_requires_gradient_sync(bool on) { reducer_->schedule().set_requires_gradient_sync(on); }
  bool requires_gradient_sync() const { return reducer_->schedule().requires_gradient_sync(); }

 private:
  std::vector<torch::Tensor> params_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace ddp
