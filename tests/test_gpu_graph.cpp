// ddp::CudaGraphStep on a GPU: the replayed step ends where the same steps run eagerly end (bit for
// bit, deterministic kernels, dropout included), on one NCCL rank through DistributedDataParallel;
// a learning rate set between replays moves inside the graph; the last, partial batch runs eagerly
// (or is refused when asked). The one rank keeps its allreduces (ProcessGroupOptions::
// collectives_at_world_size_1: a one-rank NCCL communicator), so the capture holds NCCL collectives
// on one GPU too; TwoNcclRanks... (two GPUs; skipped on one) adds peers. DDP is built under the
// capture stream (CudaGraphStep::capture_stream), each replay is waited for through the group.
// Without a GPU every test is skipped. Its refusals are unit tests (test_cuda_graph_step.cpp).
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/core/StreamGuard.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ddp/adadelta.h"
#include "ddp/cuda_graph_step.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/error.h"
#include "gpu_test_support.h"
#include "multiprocess.h"

namespace {

// A small CNN with dropout (the course's CNN's layers, 8x8 images): random kernels in the step.
struct GraphNetImpl : torch::nn::Module {
  torch::nn::Conv2d conv{torch::nn::Conv2dOptions(1, 4, 3)};
  torch::nn::Dropout dropout{0.25};
  torch::nn::Linear fc{4 * 6 * 6, 10};
  GraphNetImpl() {
    register_module("conv", conv);
    register_module("dropout", dropout);
    register_module("fc", fc);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::log_softmax(fc(dropout(torch::relu(conv(x))).flatten(1)), 1);
  }
};
TORCH_MODULE(GraphNet);

struct GraphRun {
  std::vector<torch::Tensor> params;  // at the end, on the CPU
  std::vector<double> losses;         // per step
  int64_t replays = 0, eager_steps = 0;
};

constexpr int kFullBatches = 10;  // of 16 images, then one of 5 (the epoch's partial batch)

// Trains kFullBatches + 1 steps through DDP on `pg`, Adadelta at 1.0, then 0.5 from step 6 (a
// schedule), on batches drawn from `data_seed` (each rank its own). warmup_steps beyond the step
// count: every step eager, through the same capturable kernels.
GraphRun train_graph_net(const std::shared_ptr<ddp::ProcessGroup>& pg, torch::Device device, int64_t warmup_steps,
                         uint64_t data_seed = 11) {
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  torch::manual_seed(3);  // the weights, and the CUDA generator the dropout draws from
  GraphNet net;
  net->to(device);
  // DDP's gradient hooks on the stream the step is captured on.
  const c10::Stream capture_stream = ddp::CudaGraphStep::capture_stream(device);
  std::unique_ptr<ddp::DistributedDataParallel<GraphNet>> ddp_model;
  {
    c10::StreamGuard on_capture_stream(capture_stream);
    ddp_model = std::make_unique<ddp::DistributedDataParallel<GraphNet>>(net, pg);
  }
  ddp::Adadelta optimizer(net->parameters(), 1.0);
  auto step = [&](const torch::Tensor& x, const torch::Tensor& y) {
    optimizer.zero_grad();
    auto loss = torch::nll_loss((*ddp_model)(x), y);
    loss.backward();
    optimizer.step();
    return loss;
  };
  ddp::CaptureContext context;
  context.device = device;
  context.backend = pg->backend_name();
  context.stream = capture_stream;
  context.gradient_streams = ddp_model->gradient_streams();
  context.process_group = pg.get();
  ddp::CudaGraphStep graphed(step, optimizer, context, {.warmup_steps = warmup_steps});
  auto data = torch::make_generator<at::CPUGeneratorImpl>(data_seed);
  GraphRun run;
  for (int i = 0; i <= kFullBatches; ++i) {
    const int64_t n = i < kFullBatches ? 16 : 5;
    const auto x = torch::randn({n, 1, 8, 8}, data).to(device);
    const auto y = torch::randint(0, 10, {n}, data, torch::kLong).to(device);
    if (i == 6) optimizer.param_groups()[0].options().set_lr(0.5);
    const torch::Tensor loss = graphed(x, y);
    graphed.wait_for_replays();  // before the host reads it: the timed wait
    run.losses.push_back(loss.item<double>());
  }
  for (const auto& p : net->parameters()) run.params.push_back(p.detach().cpu());
  run.replays = graphed.replays();
  run.eager_steps = graphed.eager_steps();
  return run;
}

}  // namespace

// One NCCL rank: 3 eager warm-up steps, the capture, 6 more replays (the rate halved between two of
// them), the partial batch eager; every loss and the final weights equal those of the same 11 steps
// run eagerly, bit for bit (deterministic cuDNN and cuBLAS; dropout's draws registered with the graph).
TEST(GpuGraph, ReplaysEqualTheSameStepsRunEagerlyOnOneNcclRank) {
  REQUIRE_GPUS(1);
  const torch::Device device(torch::kCUDA, 0);
  gpu_test::TempDir dir;
  auto pg = gpu_test::nccl_group_of_one(dir, device);
  const GraphRun eager = train_graph_net(pg, device, /*warmup_steps=*/1000);
  const GraphRun graphed = train_graph_net(pg, device, /*warmup_steps=*/3);
  EXPECT_EQ(eager.replays, 0);
  EXPECT_EQ(graphed.replays, kFullBatches - 3);  // the capture's own step included
  EXPECT_EQ(graphed.eager_steps, 3 + 1);         // the warm-up, the partial batch
  ASSERT_EQ(graphed.losses.size(), eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) EXPECT_EQ(graphed.losses[i], eager.losses[i]) << "step " << i;
  ASSERT_EQ(graphed.params.size(), eager.params.size());
  for (size_t i = 0; i < eager.params.size(); ++i)
    EXPECT_TRUE(torch::equal(graphed.params[i], eager.params[i]))
        << "parameter " << i << ": max difference " << (graphed.params[i] - eager.params[i]).abs().max().item<double>();
  EXPECT_NE(graphed.losses.front(), graphed.losses[kFullBatches - 1]) << "the replays trained nothing";
}

// The rate lives on the device: set to 0 between replays, a replay leaves the weights as they are;
// set to 1 again, the next replay moves them. No DDP (one process). A batch of another shape is
// refused when eager_on_shape_change is off, naming the fix.
TEST(GpuGraph, ScheduleMovesTheLearningRateInsideTheGraph) {
  REQUIRE_GPUS(1);
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(5);
  GraphNet net;
  net->to(device);
  ddp::Adadelta optimizer(net->parameters(), 1.0);
  auto step = [&](const torch::Tensor& x, const torch::Tensor& y) {
    optimizer.zero_grad();
    auto loss = torch::nll_loss(net(x), y);
    loss.backward();
    optimizer.step();
    return loss;
  };
  ddp::CaptureContext context;
  context.device = device;
  ddp::CudaGraphStep graphed(step, optimizer, context, {.warmup_steps = 1, .eager_on_shape_change = false});
  const auto x = torch::randn({16, 1, 8, 8}, device),
             y = torch::randint(0, 10, {16}, torch::TensorOptions(device).dtype(torch::kLong));
  graphed(x, y);  // warm-up
  graphed(x, y);  // capture and replay
  ASSERT_TRUE(graphed.captured());
  const auto weight = [&] { return net->fc->weight.detach().clone(); };

  optimizer.param_groups()[0].options().set_lr(0.0);
  auto before = weight();
  graphed(x, y);
  EXPECT_EQ(optimizer.device_lr(0).item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(weight(), before)) << "rate 0 on the host, yet the replay moved the weights";

  optimizer.param_groups()[0].options().set_lr(1.0);
  before = weight();
  graphed(x, y);
  EXPECT_EQ(optimizer.device_lr(0).item<double>(), -1.0);
  EXPECT_FALSE(torch::equal(weight(), before)) << "rate 1 on the host, yet the replay did not move the weights";
  EXPECT_EQ(graphed.replays(), 3);
  EXPECT_EQ(optimizer.state_of(net->fc->weight)->step(), 4) << "the replays were not counted";

  try {
    graphed(x.narrow(0, 0, 5), y.narrow(0, 0, 5));
    ADD_FAILURE() << "a partial batch was replayed or run";
  } catch (const ddp::Error& e) {
    EXPECT_TRUE(gpu_test::contains(e.what(), "drop the last, partial batch")) << e.what();
  }
}

// Two NCCL ranks (one GPU each), different batches: the captured step holds the buckets' allreduces,
// and each rank's replays end where its eager steps end, bit for bit; both ranks end equal (DDP).
TEST(GpuGraph, TwoNcclRanksReplayTheAllreducesLikeEagerSteps) {
  REQUIRE_GPUS(2);
  ddp_test::RankSetup setup;
  setup.n = 2;
  setup.device = "cuda";
  setup.backend = "nccl";
  EXPECT_EQ(ddp_test::run_ranks(setup,
                                [](int rank, auto pg) {
                                  const auto seed = static_cast<uint64_t>(11 + rank);
                                  const GraphRun eager = train_graph_net(pg, pg->device(), 1000, seed);
                                  const GraphRun graphed = train_graph_net(pg, pg->device(), 3, seed);
                                  int wrong = graphed.replays == kFullBatches - 3 ? 0 : 1;
                                  for (size_t i = 0; i < eager.params.size(); ++i)
                                    wrong += torch::equal(graphed.params[i], eager.params[i]) ? 0 : 1;
                                  for (size_t i = 0; i < eager.losses.size(); ++i)
                                    wrong += graphed.losses[i] == eager.losses[i] ? 0 : 1;
                                  // Equal on both ranks: the sum of |w| gathered is the same twice.
                                  double sum = 0;
                                  for (const auto& p : graphed.params) sum += p.abs().sum().item<double>();
                                  char mine[64];
                                  std::snprintf(mine, sizeof mine, "%a", sum);  // every bit
                                  const auto sums = pg->all_gather_strings(mine);
                                  wrong += sums[0] == sums[1] ? 0 : 1;
                                  std::printf("rank %d: %d mismatches, %lld replays\n", rank, wrong,
                                              static_cast<long long>(graphed.replays));
                                  return wrong == 0 ? 0 : 1;
                                }),
            0);
}

// DDP built on the default stream, as before the fix: its retained accumulators' streams (read from
// the autograd nodes themselves) are the default stream, and the step is refused before any
// capture, naming the fix; built under the capture stream, they are that stream.
TEST(GpuGraph, DdpBuiltOnAnotherStreamIsRefusedBeforeTheCapture) {
  REQUIRE_GPUS(1);
  const torch::Device device(torch::kCUDA, 0);
  gpu_test::TempDir dir;
  auto pg = gpu_test::nccl_group_of_one(dir, device);
  GraphNet net;
  net->to(device);
  ddp::DistributedDataParallel on_default(net, pg);
  ddp::Adadelta optimizer(net->parameters(), 1.0);
  ddp::CaptureContext context;
  context.device = device;
  context.backend = pg->backend_name();
  context.stream = ddp::CudaGraphStep::capture_stream(device);
  context.gradient_streams = on_default.gradient_streams();
  ASSERT_FALSE(context.gradient_streams.empty());
  EXPECT_EQ(context.gradient_streams[0], c10::Stream(c10::Stream::DEFAULT, device));
  auto step = [](const torch::Tensor& x, const torch::Tensor&) { return x.sum(); };
  try {
    ddp::CudaGraphStep graphed(step, optimizer, context);
    ADD_FAILURE() << "DDP on the default stream was not refused";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("build DDP under the capture stream"), std::string::npos) << e.what();
  }
  GraphNet other;
  other->to(device);
  std::unique_ptr<ddp::DistributedDataParallel<GraphNet>> on_capture;
  {
    c10::StreamGuard guard(*context.stream);
    on_capture = std::make_unique<ddp::DistributedDataParallel<GraphNet>>(other, pg);
  }
  for (const auto& s : on_capture->gradient_streams()) EXPECT_EQ(s, *context.stream);
}
