// defines: Sgd — torch::optim::SGD (same options, state and snapshots) whose step uses multi-tensor
//          (_foreach_*) kernels when the parameters live on a GPU, as torch.optim.SGD does there by
//          default; on the CPU it is torch::optim::SGD's own per-tensor step.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

namespace ddp {

class Sgd : public torch::optim::SGD {
 public:
  Sgd(std::vector<torch::Tensor> params, torch::optim::SGDOptions options)
      : torch::optim::SGD(std::move(params), std::move(options)) {}
  torch::Tensor step(LossClosure closure = nullptr) override;

  // Multi-tensor kernels (torch.optim.SGD's foreach=True) or one tensor at a time (False). Unset,
  // as in Python: multi-tensor when every parameter of a group is on a CUDA device.
  void set_foreach(std::optional<bool> foreach) { foreach_ = foreach; }

 private:
  std::optional<bool> foreach_;
};

}  // namespace ddp
