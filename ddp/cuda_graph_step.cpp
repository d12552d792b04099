#include "ddp/cuda_graph_step.h"
#include "ddp/config.h"  // defines: DDPW_HAVE_CUDA

#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "ddp/error.h"
#include "ddp/graph_capturable.h"
#include "ddp/process_group.h"
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
  if (!context.gradient_streams.empty()) {
    DDP_CHECK(context.stream.has_value(),
              "DDP's gradient hooks run on the stream that was current when it was built, and the capture would "
              "run on a new side stream: the hooks' work would land on a stream outside the capture",
              "make the capture stream first (CudaGraphStep::capture_stream(device)), build DDP under it "
              "(c10::StreamGuard), and pass it as CaptureContext::stream");
    check_streams(context.gradient_streams, *context.stream);
  }
}

namespace {

std::string stream_text(const c10::Stream& s) {
  std::ostringstream text;
  text << s;  // "stream 3 on device cuda:0"
  return text.str();
}

}  // namespace

void CudaGraphStep::check_streams(const std::vector<c10::Stream>& gradient_streams, const c10::Stream& capture) {
  for (const auto& s : gradient_streams)
    DDP_CHECK(s == capture,
              "DDP's gradient hooks run on " + stream_text(s) +
                  " (the stream current when it was built), but the "
                  "step is captured on " +
                  stream_text(capture) +
                  ": the accumulators, the bucket copies and the allreduces' issue would run outside the capture, "
                  "which fails (or records an incomplete graph)",
              "build DDP under the capture stream: CudaGraphStep::capture_stream(device) first, then the wrapper "
              "inside a c10::StreamGuard on it, and that stream as CaptureContext::stream");
}

c10::Stream CudaGraphStep::capture_stream(const torch::Device& device) {
#ifdef DDPW_HAVE_CUDA
  if (device.is_cuda())
    return c10::cuda::getStreamFromPool(false, device.has_index() ? device.index() : c10::cuda::current_device());
#endif
  return c10::Stream(c10::Stream::DEFAULT, device);  // nothing to capture there: check() says so
}

bool PolledWork::wait(std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  while (!done_()) {
    TORCH_CHECK(timeout == ::kNoTimeout || std::chrono::steady_clock::now() - start < timeout,
                "the work did not complete within ", timeout.count(), " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

void ReplayWaits::after(c10::intrusive_ptr<c10d::Work> replay) {
  queued_.push_back(std::move(replay));
  while (queued_.size() > 1) wait_oldest();
}

void ReplayWaits::all() {
  while (!queued_.empty()) wait_oldest();
}

void ReplayWaits::wait_oldest() {
  c10::intrusive_ptr<c10d::Work> work = std::move(queued_.front());
  queued_.pop_front();
  ++waited_;
  wait_(work, "CUDA graph replay " + std::to_string(waited_) + " (a replayed collective has no NCCL watchdog)");
}

#ifdef DDPW_HAVE_CUDA

struct CudaGraphStep::Graph {
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream side;  // warm-up and capture run here, as torch.cuda.graph does
  explicit Graph(const c10::Stream& stream) : side(stream) {}
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
  if (ProcessGroup* pg = context_.process_group)
    replay_waits_ = std::make_unique<ReplayWaits>(
        [pg](const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) { pg->wait_on_host(work, what); });
}

void CudaGraphStep::wait_for_replays() {
  if (replay_waits_) replay_waits_->all();
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
  if (!graph_) graph_ = std::make_unique<Graph>(context_.stream ? *context_.stream : capture_stream(context_.device));
  // Each replay's end, as a work the group's host wait can time (see the header); queued after it.
  auto watch_replay = [&] {
    if (!replay_waits_) return;
    auto ended = std::make_shared<at::cuda::CUDAEvent>();
    ended->record(current);
    replay_waits_->after(c10::make_intrusive<PolledWork>([ended] { return ended->query(); }));
  };

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
    watch_replay();
    ++replays_;
    return static_loss_.clone();
  }
  capturable.update_device_lr();
  capturable.count_replayed_step();
  graph_->graph.replay();
  watch_replay();
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
