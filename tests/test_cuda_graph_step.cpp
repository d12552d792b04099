// ddp::CudaGraphStep on a machine without a GPU: every refusal, with the fix it names; the course's
// --cuda-graph reaching the library's message on the CPU. What the graph computes is proven on a GPU
// (test_gpu_graph.cpp, label gpu); Adadelta's learning rate in a device tensor in test_adadelta.cpp.
// Also on the CPU: DDP's gradient streams against the capture stream (made-up stream values), and a
// replay that never ends failing at the collective timeout (a 1-rank Gloo group's host wait).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "course/from_options.h"
#include "course/options.h"
#include "course/trainer.h"
#include "course/workload.h"
#include "ddp/adadelta.h"
#include "ddp/cuda_graph_step.h"
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "multiprocess.h"

namespace {

// The message of the ddp::Error that `f` throws ("" if none: the test then fails on the contents).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct Net {
  torch::Tensor w = torch::ones({2, 2}).requires_grad_();
  std::vector<torch::Tensor> params() { return {w}; }
};

ddp::CaptureContext on_gpu() {
  ddp::CaptureContext context;
  context.device = torch::Device(torch::kCUDA, 0);  // a value only: nothing runs on it here
  context.backend = "nccl";
  return context;
}

}  // namespace

// Each thing a graph cannot replay honestly is refused before anything is captured, naming the
// fix; a context it can capture passes. Nothing here touches a GPU.
TEST(CudaGraphStep, RefusesWhatItCannotCaptureNamingTheFix) {
  Net net;
  ddp::Adadelta adadelta(net.params(), 1.0);
  torch::optim::SGD plain_sgd(net.params(), 0.1);

  auto cpu = on_gpu();
  cpu.device = torch::kCPU;
  const std::string on_cpu = error_of([&] { ddp::CudaGraphStep::check(cpu, adadelta); });
  EXPECT_TRUE(contains(on_cpu, "this step runs on cpu")) << on_cpu;
  EXPECT_TRUE(contains(on_cpu, "without")) << on_cpu;

  auto gloo = on_gpu();
  gloo.backend = "gloo";
  const std::string over_gloo = error_of([&] { ddp::CudaGraphStep::check(gloo, adadelta); });
  EXPECT_TRUE(contains(over_gloo, "Gloo process group cannot be captured")) << over_gloo;
  EXPECT_TRUE(contains(over_gloo, "nccl")) << over_gloo;

  auto unused = on_gpu();
  unused.ddp.find_unused_parameters = true;
  const std::string find_unused = error_of([&] { ddp::CudaGraphStep::check(unused, adadelta); });
  EXPECT_TRUE(contains(find_unused, "find_unused_parameters")) << find_unused;

  auto fp16 = on_gpu();
  fp16.grad_scaler = fp16.autocast = true;
  EXPECT_TRUE(contains(error_of([&] { ddp::CudaGraphStep::check(fp16, adadelta); }), "GradScaler"));
  auto bf16 = on_gpu();
  bf16.autocast = true;
  EXPECT_TRUE(contains(error_of([&] { ddp::CudaGraphStep::check(bf16, adadelta); }), "autocast"));

  const std::string host_lr = error_of([&] { ddp::CudaGraphStep::check(on_gpu(), plain_sgd); });
  EXPECT_TRUE(contains(host_lr, "learning rate as a host number")) << host_lr;

  EXPECT_NO_THROW(ddp::CudaGraphStep::check(on_gpu(), adadelta));
  auto single = on_gpu();
  single.backend = "";  // no DDP: one process
  EXPECT_NO_THROW(ddp::CudaGraphStep::check(single, adadelta));

  // The constructor checks too, before it changes the optimizer; and it needs a warm-up step.
  auto step = [](const torch::Tensor& x, const torch::Tensor&) { return x.sum(); };
  EXPECT_THROW(ddp::CudaGraphStep(step, adadelta, cpu), ddp::Error);
  EXPECT_FALSE(adadelta.capturable());
  const std::string no_warmup = error_of([&] { ddp::CudaGraphStep(step, adadelta, on_gpu(), {.warmup_steps = 0}); });
  EXPECT_TRUE(contains(no_warmup, "warmup_steps is 0")) << no_warmup;
}

// The course: --cuda-graph on the CPU stops with the library's refusal, naming the course's flags;
// a ZeRO strategy is refused by the course (its step is not captured).
TEST(CudaGraphStep, TrainerRefusesTheCpuWithTheLibrarysMessage) {
  std::vector<std::string> args{"trainer", "--epochs", "1", "--device", "cpu", "--strategy", "single", "--cuda-graph"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto options = ddpw::parse_options(static_cast<int>(argv.size()), argv.data(), "graph test",
                                           ddpw::kTrainingOptions | ddpw::kTrainerOptions);
  ASSERT_TRUE(options.cuda_graph);
  const std::string refused = error_of([&] { ddpw::Trainer(options).fit(ddpw::make_workload); });
  EXPECT_TRUE(contains(refused, "this step runs on cpu")) << refused;
  EXPECT_TRUE(contains(refused, "--device cuda")) << refused;
  EXPECT_TRUE(contains(refused, "without --cuda-graph")) << refused;

  auto zero = options;
  zero.zero_stage = 2;
  const std::string sharded = error_of([&] { ddpw::capture_context(zero, torch::Device(torch::kCUDA, 0), nullptr); });
  EXPECT_TRUE(contains(sharded, "ZeRO stage 2")) << sharded;
  auto fp16 = options;
  fp16.precision = "fp16";
  const auto context = ddpw::capture_context(fp16, torch::Device(torch::kCUDA, 0), nullptr);
  EXPECT_TRUE(context.grad_scaler && context.autocast && context.backend.empty());
}

// DDP's gradient accumulators run on the stream that was current when DDP was built; a capture on
// another stream fails on the GPU (review finding 1). The comparison, with stream values made up
// on the CPU (c10::Stream needs no CUDA to exist): the hooks on the capture stream pass; one on the
// default stream, or on the same stream id of another GPU, is refused naming the fix; gradient
// streams without a capture stream are refused before any stream is made.
TEST(CudaGraphStep, RefusesDdpBuiltOnAnotherStreamThanTheCaptureOne) {
  const c10::Stream default_stream(c10::Stream::UNSAFE, c10::Device(c10::kCUDA, 0), 0);
  const c10::Stream side(c10::Stream::UNSAFE, c10::Device(c10::kCUDA, 0), 35);
  const c10::Stream other_gpu(c10::Stream::UNSAFE, c10::Device(c10::kCUDA, 1), 35);
  EXPECT_NO_THROW(ddp::CudaGraphStep::check_streams({side, side, side}, side));
  EXPECT_NO_THROW(ddp::CudaGraphStep::check_streams({}, side));
  const std::string on_default = error_of([&] { ddp::CudaGraphStep::check_streams({side, default_stream}, side); });
  EXPECT_TRUE(contains(on_default, "DDP's gradient hooks run on stream 0 on device cuda:0")) << on_default;
  EXPECT_TRUE(contains(on_default, "captured on stream 35 on device cuda:0")) << on_default;
  EXPECT_TRUE(contains(on_default, "build DDP under the capture stream")) << on_default;
  EXPECT_FALSE(error_of([&] { ddp::CudaGraphStep::check_streams({other_gpu}, side); }).empty());

  Net net;
  ddp::Adadelta adadelta(net.params(), 1.0);
  auto context = on_gpu();
  context.gradient_streams = {default_stream};
  const std::string no_stream = error_of([&] { ddp::CudaGraphStep::check(context, adadelta); });
  EXPECT_TRUE(contains(no_stream, "CudaGraphStep::capture_stream(device)")) << no_stream;
  context.stream = side;
  EXPECT_TRUE(contains(error_of([&] { ddp::CudaGraphStep::check(context, adadelta); }), "stream 0 on device cuda:0"));
  context.gradient_streams = {side, side};
  EXPECT_NO_THROW(ddp::CudaGraphStep::check(context, adadelta));

  // On the CPU there is no stream to capture on: the CPU's own, which check() refuses as the CPU.
  EXPECT_EQ(ddp::CudaGraphStep::capture_stream(torch::kCPU), c10::Stream(c10::Stream::DEFAULT, torch::kCPU));
}

// A replay's collectives have no NCCL watchdog (review finding 3): each replay is waited for
// through the group's timed host wait, one replay behind. Here a replay that never ends (a work
// that never completes, as an event behind a stalled peer's kernel) meets a 1-rank Gloo group's
// wait_on_host with a 0.4 s collective timeout: the next step's call fails after the timeout,
// naming the replay, instead of blocking; the newest replay is not waited for until asked.
TEST(CudaGraphStep, AReplayThatNeverEndsFailsAtTheCollectiveTimeout) {
  ddp_test::RankSetup setup;
  setup.n = 1;
  setup.timeout = std::chrono::milliseconds(400);
  const int rc = ddp_test::run_ranks(setup, [](int, std::shared_ptr<ddp::ProcessGroup> pg) {
    int waits = 0;
    ddp::ReplayWaits replays([&](const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
      ++waits;
      pg->wait_on_host(work, what);
    });
    bool ok = true;
    replays.after(c10::make_intrusive<ddp::PolledWork>([] { return true; }));  // ended
    replays.after(c10::make_intrusive<ddp::PolledWork>([] { return true; }));  // waits for the first
    ok = ok && waits == 1 && replays.queued() == 1;
    replays.all();
    ok = ok && waits == 2 && replays.queued() == 0;
    replays.after(c10::make_intrusive<ddp::PolledWork>([] { return false; }));  // never ends
    ok = ok && waits == 2 && replays.queued() == 1;  // queued, not waited for: the GPU keeps its lead
    const auto start = std::chrono::steady_clock::now();
    const std::string stalled = error_of([&] {
      replays.after(c10::make_intrusive<ddp::PolledWork>([] { return true; }));  // the next step's replay
    });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("after %.2f s: %s\n", waited, stalled.c_str());
    ok = ok && contains(stalled, "CUDA graph replay 3") && contains(stalled, "collective timeout") && waited >= 0.4 &&
         waited < 5;
    return ok ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}
