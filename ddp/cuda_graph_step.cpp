#include "ddp/cuda_graph_step.h"
#include "ddp/config.h"  // defines: DDPW_HAVE_CUDA

#include <string>
#include <utility>

#include "ddp/error.h"
#include "ddp/graph_capturable.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

#ifdef DDPW_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddp {

namespace {

std::string shape_of(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.device() == b.device();
}

}  // namespace

void CudaGraphStep::check(const CaptureContext& context, const torch::optim::Optimizer& optimizer) {
  const std::string off = "train without " + setting_name(Setting::kCudaGraph) + " (eager steps)";
  DDP_CHECK(context.device.is_cuda(),
            "a CUDA graph captures GPU kernels, but this step runs on " + context.device.str(),
            "train on a CUDA device (" + setting_value(Setting::kDevice, "cuda") + "), or " + off);
#ifndef DDPW_HAVE_CUDA
  throw Error("this build of the library has no CUDA (LibTorch without CUDA): nothing to capture",
              "build against a CUDA-enabled LibTorch, or " + off);
#endif
  DDP_CHECK(context.backend != "gloo",
            "a Gloo process group cannot be captured in a CUDA graph: its collectives on CUDA tensors copy "
            "through the host and wait there",
            "use the NCCL backend (" + setting_value(Setting::kBackend, "nccl") + "), or " + off);
  DDP_CHECK(!context.ddp.find_unused_parameters,
            "find_unused_parameters reads on the host, every step, which parameters had a gradient: a CUDA "
            "graph replays no host code",
            "train with DdpOptions::find_unused_parameters = false (every parameter used each step), or " + off);
  DDP_CHECK(!context.grad_scaler,
            "GradScaler (fp16) changes its scale and growth count between steps; capturing it is not supported "
            "here",
            "train in fp32 or bf16 without a GradScaler, or " + off);
  DDP_CHECK(!context.autocast,
            "autocast keeps a cache of cast weights that a CUDA graph would freeze (PyTorch captures it only "
            "with cache_enabled=False); not supported here",
            "train in fp32, or " + off);
  DDP_CHECK(dynamic_cast<const GraphCapturable*>(&optimizer) != nullptr,
            "the optimizer keeps its learning rate as a host number, which a CUDA graph would freeze at the "
            "capture (a schedule would stop moving)",
            "use an optimizer that reads it from the device (GraphCapturable: ddp::Adadelta, ddp::Sgd), or " + off);
}

#ifdef DDPW_HAVE_CUDA

struct CudaGraphStep::Graph {
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream side;  // warm-up and capture run here, as torch.cuda.graph does
  explicit Graph(c10::DeviceIndex device) : side(c10::cuda::getStreamFromPool(false, device)) {}
};

namespace {

// `waiter` waits for what is queued on `waited` so far (no host synchronization).
void wait_stream(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& waited) {
  at::cuda::CUDAEvent event;
  event.record(waited);
  event.block(waiter);
}

}  // namespace

#else

struct CudaGraphStep::Graph {};

#endif

CudaGraphStep::CudaGraphStep(StepFunction step, torch::optim::Optimizer& optimizer, const CaptureContext& context,
                             CudaGraphOptions options)
    : step_(std::move(step)), optimizer_(optimizer), context_(context), options_(options) {
  check(context, optimizer);
  DDP_CHECK(options.warmup_steps >= 1,
            "CudaGraphOptions::warmup_steps is " + std::to_string(options.warmup_steps) +
                ": the optimizer's state must exist before the capture",
            "run at least 1 warm-up step (PyTorch's examples run 3)");
  DDP_CHECK(step_ != nullptr, "CudaGraphStep was given no step function", "pass the function that trains one batch");
#ifdef DDPW_HAVE_CUDA
  if (!context_.device.has_index())  // "cuda": the current device, as LibTorch places tensors there
    context_.device = torch::Device(torch::kCUDA, c10::cuda::current_device());
#endif
  dynamic_cast<GraphCapturable&>(optimizer).make_capturable();
}

CudaGraphStep::~CudaGraphStep() = default;

bool CudaGraphStep::captured() const { return static_loss_.defined(); }
int64_t CudaGraphStep::replays() const { return replays_; }
int64_t CudaGraphStep::eager_steps() const { return eager_steps_; }

torch::Tensor CudaGraphStep::operator()(const torch::Tensor& input, const torch::Tensor& target) {
#ifdef DDPW_HAVE_CUDA
  auto& capturable = dynamic_cast<GraphCapturable&>(optimizer_);
  if (!static_input_.defined()) {  // the first batch fixes the shapes the graph is captured for
    DDP_CHECK(input.device() == context_.device && target.device() == context_.device,
              "the batch is on " + input.device().str() + " / " + target.device().str() + ", the step on " +
                  context_.device.str(),
              "move the batch to the model's device before the step");
    static_input_ = torch::empty_like(input);
    static_target_ = torch::empty_like(target);
  }
  if (!same_layout(input, static_input_) || !same_layout(target, static_target_)) {
    DDP_CHECK(options_.eager_on_shape_change,
              "this batch is " + shape_of(input) + " -> " + shape_of(target) + ", the captured one " +
                  shape_of(static_input_) + " -> " + shape_of(static_target_) + ": a CUDA graph replays fixed shapes",
              "drop the last, partial batch, or set CudaGraphOptions::eager_on_shape_change to run it eagerly");
    ++eager_steps_;
    return step_(input, target).detach().clone();
  }
  static_input_.copy_(input, /*non_blocking=*/true);
  static_target_.copy_(target, /*non_blocking=*/true);
  const auto device = context_.device.index();
  const auto current = c10::cuda::getCurrentCUDAStream(device);
  if (!graph_) graph_ = std::make_unique<Graph>(device);

  if (++calls_ <= options_.warmup_steps) {  // eager, on the side stream (as PyTorch's warm-up)
    wait_stream(graph_->side, current);
    torch::Tensor loss;
    {
      c10::cuda::CUDAStreamGuard on_side(graph_->side);
      loss = step_(static_input_, static_target_).detach();
    }
    wait_stream(current, graph_->side);
    ++eager_steps_;
    // The copy on the caller's stream: the side stream's block of `loss` is reused only after the
    // side stream waits for this stream again (the next call).
    return loss.clone();
  }
  if (!captured()) {
    // Nothing in flight, cached blocks returned: the graph's pool starts clean (torch.cuda.graph).
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    capturable.update_device_lr();  // now, not inside the capture: a fill there would replay the old rate
    {
      c10::cuda::CUDAStreamGuard on_side(graph_->side);
      graph_->graph.capture_begin();
      try {
        static_loss_ = step_(static_input_, static_target_).detach();
      } catch (...) {
        try {
          graph_->graph.capture_end();
        } catch (...) {  // the capture is invalid anyway; the first error says why
        }
        static_loss_ = torch::Tensor();
        throw;
      }
      graph_->graph.capture_end();
    }
    // The capture recorded the step without running it (step() counted it on the host): run it.
    graph_->graph.replay();
    ++replays_;
    return static_loss_.clone();
  }
  capturable.update_device_lr();
  capturable.count_replayed_step();
  graph_->graph.replay();
  ++replays_;
  return static_loss_.clone();
#else
  (void)input;
  (void)target;
  DDP_INTERNAL_ASSERT(false, "CudaGraphStep without CUDA passed check()");
  return {};
#endif
}

}  // namespace ddp
