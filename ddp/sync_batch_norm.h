// defines: SyncBatchNorm — PyTorch's torch.nn.SyncBatchNorm in C++: batch normalisation whose batch
//          statistics are those of all ranks' batches together; convert_sync_batchnorm, PyTorch's
//          SyncBatchNorm.convert_sync_batchnorm for what C++ can swap after construction.
//
// Training, world size > 1 (PyTorch's torch/nn/modules/_functions.py SyncBatchNorm, torch 2.11):
//   * forward: each rank computes its count, mean and sum of squared deviations per channel;
//     one all-gather brings every rank's; the global mean and (biased) variance follow by the
//     parallel-variance formula, so uneven batch sizes, an empty batch on a rank included, weigh
//     as they should. The running statistics take the global mean and the global unbiased
//     variance (n / (n - 1), n = all ranks' samples), as PyTorch does. num_batches_tracked counts
//     forwards (momentum unset: cumulative average, as BatchNorm).
//   * backward: each rank sums dy and dy * (x - mean) per channel; one all-reduce makes them
//     global, then the input gradient is PyTorch's batch_norm_backward_elemt. The weight and bias
//     gradients stay local sums: DDP's gradient average makes them global (as in PyTorch).
// World size 1 (unless the group keeps its collectives there: ProcessGroup::skips_collectives) or no
// process group: plain batch norm (torch::batch_norm) on this rank's batch, as PyTorch's
// SyncBatchNorm without an initialised group. Evaluation: plain batch norm with the
// running statistics.
//
// Where we differ from PyTorch:
//   * CPU tensors are supported (Gloo). PyTorch's refuses them ("expected input tensor to be on
//     GPU") because torch.batch_norm_stats has no CPU kernel; this one is written with plain
//     tensor operations, which run on the CPU and on CUDA (Gloo or NCCL).
//   * The statistics are gathered as float64 (count, mean, sum of squared deviations; PyTorch:
//     mean, 1/std and count in the input's float type) and combined without a host
//     synchronisation (PyTorch reads the counts on the host to drop empty ranks).
//   * There is no default group: DistributedDataParallel hands its group to the SyncBatchNorm
//     layers of the module it wraps that have none; convert_sync_batchnorm sets it too.
//   * A channel count different from num_features is an error here before any collective.
//
// State: the names and shapes of torch::nn::BatchNorm{1,2,3}d ("weight", "bias", "running_mean",
// "running_var", "num_batches_tracked"), so a state_dict, a snapshot or an exported file loads into
// either, in C++ and in Python (nn.BatchNorm2d or nn.SyncBatchNorm).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <ostream>

#include "ddp/module_holder.h"  // defines: ModuleHandle, module_ptr
#include "ddp/process_group.h"

namespace ddp {

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  // As torch::nn::BatchNorm2d(options); `pg` may be set later (set_process_group,
  // convert_sync_batchnorm, or the DistributedDataParallel that wraps the model).
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, std::shared_ptr<ProcessGroup> pg = nullptr);
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}

  // Input [N, C, ...] (at least 2-D, as PyTorch's SyncBatchNorm), C = num_features.
  torch::Tensor forward(const torch::Tensor& input);

  void reset() override;  // fresh tensors: weight 1, bias 0, running mean 0, variance 1, count 0
  void reset_running_stats();
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  void set_process_group(std::shared_ptr<ProcessGroup> pg) { pg_ = std::move(pg); }
  const std::shared_ptr<ProcessGroup>& process_group() const { return pg_; }

  torch::nn::BatchNormOptions options;
  torch::Tensor weight, bias;                                    // undefined unless options.affine()
  torch::Tensor running_mean, running_var, num_batches_tracked;  // undefined unless track_running_stats()

  // A SyncBatchNorm that holds `from`'s very tensors (parameters and buffers: an optimizer built
  // on them keeps working), its options and its training mode. `from` must be a
  // torch::nn::BatchNorm{1,2,3}dImpl (else nullptr).
  static std::shared_ptr<SyncBatchNormImpl> sharing_state_of(const torch::nn::Module& from,
                                                             std::shared_ptr<ProcessGroup> pg);

 private:
  struct ShareTag {};
  SyncBatchNormImpl(ShareTag, const torch::nn::BatchNormOptions& from, std::shared_ptr<ProcessGroup> pg)
      : options(from), pg_(std::move(pg)) {}
  void register_state(torch::Tensor w, torch::Tensor b, torch::Tensor mean, torch::Tensor var, torch::Tensor count);

  std::shared_ptr<ProcessGroup> pg_;
};

// The holder, as torch::nn::BatchNorm2d: a drop-in type for a member declared
// `torch::nn::BatchNorm2d bn{nullptr}` (declare `ddp::SyncBatchNorm bn{nullptr}` and construct it
// with `ddp::SyncBatchNorm(64)` or `ddp::SyncBatchNorm(torch::nn::BatchNormOptions(64).momentum(0.01))`).
TORCH_MODULE(SyncBatchNorm);

// PyTorch's SyncBatchNorm.convert_sync_batchnorm, in place. Every torch::nn::BatchNorm{1,2,3}d of
// `module` becomes a SyncBatchNorm on `pg` that shares its parameters and buffers, and every
// SyncBatchNorm already there gets `pg`. Returns how many SyncBatchNorm layers the module has now.
//
// What C++ can replace: a module held by a container, torch::nn::Sequential, ModuleList or
// ModuleDict (the container's forward or iteration reads its own slot, which is rewritten
// together with the registration). What it cannot: a BatchNorm held by a typed member
// (`torch::nn::BatchNorm2d bn` in a module of yours: the member would keep calling the old
// module), one that is also held outside its container (a member or a variable pointing at it),
// or `module` itself being a BatchNorm. Then nothing is changed and ddp::Error names each such
// BatchNorm (its path, e.g. "block1.bn") and the fix: declare the member as ddp::SyncBatchNorm,
// or put the BatchNorm into a Sequential. Never a silent no-op.
// Call it before DistributedDataParallel wraps the module and before the optimizer is built (as
// in PyTorch; the shared tensors keep an earlier optimizer working).
size_t convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<ProcessGroup> pg);
// The same for a holder (torch::nn::Sequential, a TORCH_MODULE(Net)) or a std::shared_ptr<NetImpl>.
template <ModuleHandle M>
size_t convert_sync_batchnorm(const M& module, std::shared_ptr<ProcessGroup> pg) {
  return convert_sync_batchnorm(*module_ptr(module), std::move(pg));
}

// Gives `pg` to every SyncBatchNorm of `module` that has no group (DistributedDataParallel does it).
void give_group_to_sync_batchnorm(torch::nn::Module& module, const std::shared_ptr<ProcessGroup>& pg);

}  // namespace ddp
