// defines: GradientHooks — the two autograd hooks a bucketed data-parallel engine is built on:
//   * a post-hook on each parameter's gradient accumulator: it runs once .grad holds this backward
//     pass's final sum (a hook on the parameter itself would see the incoming gradient before
//     accumulation, and an in-place change of it would never reach .grad);
//   * the autograd engine's end-of-backward callback, with a flag that turns true when an exception
//     ends the pass first (the engine then drops the callback unrun).
#pragma once

#include <torch/torch.h>

#include "ddp/detail/torch_compat.h"  // defines: torch_compat::NodePtr

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

namespace ddp {

class GradientHooks {
 public:
  // on_ready(i) runs inside backward when params[i].grad() is final for this pass.
  GradientHooks(const std::vector<torch::Tensor>& params, std::function<void(size_t)> on_ready);
  ~GradientHooks();  // the hooks stay on the accumulators, but do nothing from then on
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;

  // Queues on_end to run when the running backward pass is done, before backward() returns.
  // The flag returned turns true if the pass ends by an exception instead (each call has its
  // own flag, so a late drop cannot touch the next pass).
  std::shared_ptr<std::atomic<bool>> call_at_end_of_backward(std::function<void()> on_end);

  // The stream each hooked accumulator runs on, and its hook with it (on a GPU: the stream that was
  // current when the accumulator was made; a CUDA graph must capture on that stream). Parameters
  // on the CPU have none.
  std::vector<c10::Stream> streams() const;

 private:
  std::vector<detail::torch_compat::NodePtr> accumulators_;  // kept alive: the hooks live on them
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);    // hooks outlive us: they check this first
};

}  // namespace ddp
