// defines: SyncCounter — counts the host synchronizations with a GPU that CUDA's sync debug mode
//          reports ("called a synchronizing CUDA operation": a blocking copy, .item(), a stream
//          synchronize) while counting is on, as torch.cuda.set_sync_debug_mode("warn") does for
//          Python. The benchmark and the GPU tests use it to show a training step does not wait.
#pragma once

#include "ddp/config.h"  // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

#ifdef DDPW_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>  // defines: warning_state (sync debug mode)
#endif

namespace ddpw {

// Any other warning goes on to the handler that was there before. The handler is per thread:
// warnings raised on the autograd engine's device threads reach it because the engine replays a
// backward pass's warnings on the thread that called backward() (Python's handler sees them the
// same way). On a build without CUDA it counts nothing (available() is false).
class SyncCounter : public c10::WarningHandler {
 public:
  SyncCounter() = default;
  SyncCounter(const SyncCounter&) = delete;
  SyncCounter& operator=(const SyncCounter&) = delete;
  ~SyncCounter() override { stop(); }

  static bool available() {
#ifdef DDPW_HAVE_CUDA
    return true;
#else
    return false;
#endif
  }
  void start() {
    if (!available() || counting_) return;
    previous_ = c10::WarningUtils::get_warning_handler();
    c10::WarningUtils::set_warning_handler(this);
#ifdef DDPW_HAVE_CUDA
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
#endif
    counting_ = true;
  }
  void stop() {
    if (!counting_) return;
#ifdef DDPW_HAVE_CUDA
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
#endif
    c10::WarningUtils::set_warning_handler(previous_);
    counting_ = false;
  }
  int64_t count() const { return count_; }

  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchronizing CUDA operation") != std::string::npos)
      ++count_;
    else if (previous_ != nullptr)
      previous_->process(warning);
  }

 private:
  bool counting_ = false;
  int64_t count_ = 0;
  c10::WarningHandler* previous_ = nullptr;
};

}  // namespace ddpw
