// defines: what the library's optimizers (Adadelta, Sgd) share: the key of a parameter's state, the
//          choice between multi-tensor (_foreach_*) and per-tensor updates as torch.optim makes it,
//          the grouping of parameters by device and dtype that multi-tensor kernels need, and
//          SkipOnDevice (a step that GradScaler's found_inf cancels without a host read).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

namespace ddp::optim_detail {

// The optimizer's state is keyed by the parameter's TensorImpl address (what LibTorch's
// serialize.h looks up).
template <typename StateMap>
typename StateMap::key_type state_key(const StateMap&, const torch::Tensor& param) {
  return param.unsafeGetTensorImpl();
}

// torch.optim's default (foreach=None): multi-tensor kernels when every parameter is on a CUDA
// device; on the CPU, one tensor at a time (there the _foreach_ ops are a loop over the same
// per-tensor kernels, with nothing to gain).
inline bool use_foreach(std::optional<bool> requested, const std::vector<torch::Tensor>& params) {
  if (requested) return *requested;
  if (params.empty()) return false;
  for (const auto& p : params)
    if (!p.is_cuda()) return false;
  return true;
}

// Indices of `params` grouped by (device, dtype), in order of first appearance: a multi-tensor
// kernel takes tensors of one device and one dtype (Optimizer._group_tensors_by_device_and_dtype).
inline std::vector<std::vector<size_t>> group_by_device_and_dtype(const std::vector<torch::Tensor>& params) {
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < params.size(); ++i) {
    bool placed = false;
    for (auto& g : groups) {
      const auto& first = params[g.front()];
      if (first.device() == params[i].device() && first.scalar_type() == params[i].scalar_type()) {
        g.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({i});
  }
  return groups;
}

// The tensors of `all` at `indices`.
inline std::vector<torch::Tensor> pick(const std::vector<torch::Tensor>& all, const std::vector<size_t>& indices) {
  std::vector<torch::Tensor> out;
  out.reserve(indices.size());
  for (size_t i : indices) out.push_back(all[i]);
  return out;
}

// A step GradScaler's found_inf may cancel, decided on the device: the optimizer computes each new
// value into a new tensor and commits it; where found_inf is set, the old value stays, bit for bit
// (a select: inf or NaN in the discarded result cannot leak in, as they would through arithmetic).
class SkipOnDevice {
 public:
  explicit SkipOnDevice(const torch::Tensor& found_inf) : found_inf_(found_inf) {}
  // found_inf != 0 as a 0-dim bool tensor on `device` (made once per device).
  const torch::Tensor& on(const torch::Device& device) {
    for (const auto& s : skips_)
      if (s.device() == device) return s;
    skips_.push_back(found_inf_.to(device, /*non_blocking=*/true).ne(0));
    return skips_.back();
  }
  // current = found_inf ? current : updated, in place.
  void commit(torch::Tensor& current, const torch::Tensor& updated) {
    at::where_out(current, on(current.device()), current, updated);
  }

 private:
  torch::Tensor found_inf_;
  std::vector<torch::Tensor> skips_;
};

}  // namespace ddp::optim_detail
