// defines: DeviceLearningRates — each parameter group's learning rate, negated, in a 0-dim tensor
//          on the group's first parameter's device: what a capturable optimizer step multiplies by,
//          so that a replayed CUDA graph uses the current rate, not the one of its capture
//          (GraphCapturable, graph_capturable.h; Adadelta and Sgd hold one).
#pragma once

#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "ddp/error.h"

namespace ddp::optim_detail {

class DeviceLearningRates {
 public:
  // Makes the tensor of every group that has none yet and fills each whose rate changed since the
  // last call: one fill kernel per changed group, no host synchronization.
  void update(std::vector<torch::optim::OptimizerParamGroup>& groups) {
    for (size_t g = neg_lr_.size(); g < groups.size(); ++g) {
      const auto& params = groups[g].params();
      DDP_CHECK(!params.empty(), "parameter group " + std::to_string(g) + " is empty: its learning rate has no device",
                "give every parameter group at least one parameter");
      neg_lr_.push_back(torch::zeros({}, torch::TensorOptions(params.front().device()).dtype(params.front().dtype())));
      lr_.push_back(std::numeric_limits<double>::quiet_NaN());  // equals no rate: filled below
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      const double lr = groups[g].options().get_lr();
      if (lr == lr_[g]) continue;
      neg_lr_[g].fill_(-lr);
      lr_[g] = lr;
    }
  }
  // -lr of `group` (0-dim), as update() last filled it.
  const torch::Tensor& negated(size_t group) const { return neg_lr_.at(group); }
  // The same in the dtype and on the device of `like` (no copy when they match).
  torch::Tensor negated_like(size_t group, const torch::Tensor& like) const {
    return neg_lr_.at(group).to(like.device(), like.scalar_type());
  }

 private:
  std::vector<torch::Tensor> neg_lr_;
  std::vector<double> lr_;  // the rate each tensor holds
};

}  // namespace ddp::optim_detail
