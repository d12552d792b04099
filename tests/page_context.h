// defines: page_context — the names a page's ```cpp fragment block may use without declaring them
// (tests/page_code.py wraps each fragment in a function that declares these; docs/tests.md, "The
// pages' code"). Fragments are compiled, never run; they see the library's headers included here.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "ddp/autocast.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/grad_scaler.h"
#include "ddp/join.h"
#include "ddp/process.h"
#include "ddp/process_group.h"
#include "ddp/setting_names.h"
#include "ddp/sgd.h"
#include "ddp/sync_batch_norm.h"
#include "ddp/zero_data_parallel.h"

namespace page_context {

// The pages' Net: a TORCH_MODULE holder, with a BatchNorm (buffers).
struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc(register_module("fc", torch::nn::Linear(4, 4))), bn(register_module("bn", torch::nn::BatchNorm1d(4))) {}
  torch::Tensor forward(const torch::Tensor& input) { return bn(fc(input)); }
  torch::nn::Linear fc;
  torch::nn::BatchNorm1d bn;
};
TORCH_MODULE(Net);

struct Context {
  std::shared_ptr<ddp::ProcessGroup> pg;  // from ddp::init_process_group
  torch::Device device{torch::kCPU};      // this rank's device
  Net net;                                // the model, not yet wrapped
  torch::Tensor x, y;                     // a batch and its targets
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss_fn;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> my_batches;  // this rank's batches
  torch::optim::SGD optimizer{net->parameters(), 0.1};
  int64_t n = 0;  // a count
};

}  // namespace page_context

#define PAGE_CONTEXT_NAMES(c)                         \
  [[maybe_unused]] auto& pg = (c).pg;                 \
  [[maybe_unused]] auto& device = (c).device;         \
  [[maybe_unused]] auto& net = (c).net;               \
  [[maybe_unused]] auto& x = (c).x;                   \
  [[maybe_unused]] auto& y = (c).y;                   \
  [[maybe_unused]] auto& loss_fn = (c).loss_fn;       \
  [[maybe_unused]] auto& my_batches = (c).my_batches; \
  [[maybe_unused]] auto& optimizer = (c).optimizer;   \
  [[maybe_unused]] auto& n = (c).n;
