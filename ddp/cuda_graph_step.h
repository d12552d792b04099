// defines: CudaGraphStep, CudaGraphOptions, CaptureContext — a whole training step (forward,
//          backward with DDP's bucketed allreduces, the optimizer's step) captured once in a CUDA
//          graph and replayed: one launch per step instead of hundreds (PyTorch's "whole-network
//          capture", torch.cuda.graph).
//
//   const auto stream = ddp::CudaGraphStep::capture_stream(device); // before the wrapper:
//   std::optional<ddp::DistributedDataParallel<Net>> ddp_model;
//   {
//     c10::StreamGuard on_capture_stream(stream);                  // DDP built on it (c10/core/StreamGuard.h)
//     ddp_model.emplace(model, pg);
//   }
//   ddp::Adadelta optimizer(model->parameters());                 // GraphCapturable (ddp::Sgd too)
//   auto step = [&](const torch::Tensor& x, const torch::Tensor& y) {
//     optimizer.zero_grad();                                      // .grad to none: made in the graph's pool
//     auto loss = torch::nll_loss(ddp_model(x), y);
//     loss.backward();                                            // the buckets' allreduces (NCCL) are captured
//     optimizer.step();
//     return loss;
//   };
//   ddp::CudaGraphStep graphed(step, optimizer, {.device = device, .backend = pg->backend_name(),
//                              .stream = stream, .gradient_streams = ddp_model->gradient_streams(),
//                              .process_group = pg.get()});
//   for (...) loss = graphed(batch.input, batch.target);          // the loss: a copy, yours to keep
//
//   * The first warmup_steps calls run `step` eagerly on a side stream (PyTorch's warm-up: the
//     optimizer's state and cuDNN's choices are made then, outside the graph); the next call
//     captures it on a side stream with the allocator's private pool for the graph, then replays it;
//     every later call copies the batch into the static input tensors and replays.
//   * The learning rate lives in a device tensor (GraphCapturable::make_capturable, called here):
//     set_lr or a schedule between steps moves it; before each replay a changed rate is copied
//     into that tensor (a fill kernel, no synchronization). Host-side step counts are advanced.
//   * Dropout and other random kernels: the default CUDA generator is registered with the graph
//     at capture (at::cuda::CUDAGraph does it), so each replay draws new numbers; a generator of
//     your own must be registered too (not offered here).
//   * A batch of another shape or dtype than the captured one (the last, partial batch of an
//     epoch) runs `step` eagerly on it, on the same parameters, gradients and optimizer state:
//     the same numbers as an eager run; eager_on_shape_change = false refuses it instead.
//   * Refused with a ddp::Error naming the fix (check()): a CPU device, a build without CUDA, a
//     Gloo process group (its collectives on CUDA tensors go through the host: not capturable),
//     find_unused_parameters (the host reads which parameters were used, every step), an
//     optimizer that is not GraphCapturable (its learning rate would be frozen into the graph),
//     GradScaler (fp16: its skip and scale decisions) and autocast (its weight cache is not
//     graph-safe). Join (uneven inputs) and SyncBatchNorm are not checked: do not capture them.
//   * DDP keeps each parameter's gradient accumulator, and an accumulator runs (with DDP's hook:
//     the bucket copies, the allreduce's issue) on the stream that was current when it was made:
//     when DDP is built. Captured on another stream, the step's accumulators run on the default
//     stream, which cannot join a capture ("Before full-backward capture, DDP must be constructed
//     in a side-stream context", PyTorch's CUDA notes). So the capture stream exists first
//     (capture_stream), DDP is built under it, and the step is refused when the wrapper's
//     gradient_streams() are not the capture stream.
//   * A replayed NCCL collective has no watchdog (NCCL's timer watches only eager collectives), so
//     a peer that stalls inside a replay would block the host at its next read, forever. With
//     CaptureContext::process_group, each replay's end (an event on the capture stream) is waited
//     for on the host through the group (ProcessGroup::wait_on_host: the collective timeout, a
//     failed peer, a stop request; NCCL is aborted when it runs out), one replay behind: the next
//     replay is queued before the host waits for the one before it, so the GPU never waits for the
//     host. wait_for_replays() waits for the last one: call it before reading a result on the host.
//   * NCCL collectives inside a capture need NCCL >= 2.9.6 (LibTorch ships a newer one).
#pragma once

#include <torch/torch.h>

#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.h"  // defines: DdpOptions

namespace ddp {

struct CudaGraphOptions {
  int64_t warmup_steps = 3;           // eager steps before the capture (at least 1: the optimizer's state)
  bool eager_on_shape_change = true;  // another batch shape runs eagerly; false: a ddp::Error
};

// What the step does, for the refusals (CudaGraphStep::check).
struct CaptureContext {
  torch::Device device = torch::kCPU;  // where the model and the batches live
  std::string backend;                 // the DDP's process group's backend_name(); "" without DDP
  DdpOptions ddp;                      // the DDP's options, when the step trains under DDP
  bool grad_scaler = false;            // the step scales the loss with a GradScaler (fp16)
  bool autocast = false;               // the step runs under autocast (bf16, fp16)
  // The stream the warm-up and the capture run on: CudaGraphStep::capture_stream(device), made
  // before the DDP wrapper so that the wrapper is built under it. None: a new one from the pool.
  std::optional<c10::Stream> stream;
  // The DDP wrapper's gradient_streams(): refused unless each is `stream`.
  std::vector<c10::Stream> gradient_streams;
  // The DDP's process group: each replay is waited for on the host through it (see above). None
  // (no DDP, or not given): replays are not watched.
  ProcessGroup* process_group = nullptr;
};

// Replays that may still run on the GPU, each waited for through a host wait (a c10d::Work that
// completes with the replay; `wait`: ProcessGroup::wait_on_host with the collective timeout) one
// replay behind: after() waits for all but the newest, all() for every one. On the CPU with any work.
class ReplayWaits {
 public:
  using Wait = std::function<void(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what)>;
  explicit ReplayWaits(Wait wait) : wait_(std::move(wait)) {}
  void after(c10::intrusive_ptr<c10d::Work> replay);  // this replay was queued: wait for the one before
  void all();                                         // wait for every replay still queued
  size_t queued() const { return queued_.size(); }

 private:
  void wait_oldest();
  Wait wait_;
  std::deque<c10::intrusive_ptr<c10d::Work>> queued_;
  int64_t waited_ = 0;  // replays waited for so far (names the one in an error)
};

// A c10d::Work that completes when `done()` says so (a CUDA event's query), so that ProcessGroup's
// host wait (wait_for_work) polls it with the collective timeout. wait() blocks only once done.
class PolledWork : public c10d::Work {
 public:
  explicit PolledWork(std::function<bool()> done) : done_(std::move(done)) {}
  bool isCompleted() override { return done_(); }
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;

 private:
  std::function<bool()> done_;
};

class CudaGraphStep {
 public:
  using StepFunction = std::function<torch::Tensor(const torch::Tensor& input, const torch::Tensor& target)>;
  // `step` trains on (input, target) and returns the loss; `optimizer` is the one it steps. Checks
  // the context (check()) and makes the optimizer capturable; captures nothing yet.
  CudaGraphStep(StepFunction step, torch::optim::Optimizer& optimizer, const CaptureContext& context,
                CudaGraphOptions options = {});
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // One training step on this batch: eager (warm-up, another shape), the capture, or a replay.
  // Returns the loss, a tensor of its own (the next replay does not overwrite it).
  torch::Tensor operator()(const torch::Tensor& input, const torch::Tensor& target);

  bool captured() const;
  int64_t replays() const;      // steps run by replaying the graph (the captured step included)
  int64_t eager_steps() const;  // warm-up steps and batches of another shape

  // Throws a ddp::Error naming the fix if a step in this context cannot be captured honestly.
  static void check(const CaptureContext& context, const torch::optim::Optimizer& optimizer);
  // The stream to build DDP under and capture on (CaptureContext::stream): a side stream of the
  // CUDA device from LibTorch's pool; on any other device its default stream (check() refuses it).
  static c10::Stream capture_stream(const torch::Device& device);
  // Throws a ddp::Error naming the fix unless every gradient hook runs on the capture stream.
  static void check_streams(const std::vector<c10::Stream>& gradient_streams, const c10::Stream& capture);

  // Waits on the host until every replay queued so far has ended (through the group's timed wait;
  // nothing without CaptureContext::process_group): before a host read of a result.
  void wait_for_replays();

 private:
  struct Graph;  // the CUDA graph and its streams (CUDA's headers stay in the .cpp)
  StepFunction step_;
  torch::optim::Optimizer& optimizer_;
  CaptureContext context_;
  CudaGraphOptions options_;
  torch::Tensor static_input_, static_target_, static_loss_;
  int64_t replays_ = 0, eager_steps_ = 0, calls_ = 0;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<ReplayWaits> replay_waits_;  // with a process group
};

}  // namespace ddp
