// DistributedDataParallel's buffers as PyTorch's DDP keeps them (forward_sync.h), 2 CPU ranks over Gloo:
//   * with broadcast_buffers (the default) a forward through the wrapper starts from rank 0's
//     buffers: each rank's BatchNorm statistics after a step are rank 0's from before it, updated
//     with its own batch (checked against that rule computed on one process); without it each
//     rank keeps its own;
//   * when: PyTorch's rule (after a training forward: yes; after a forward under NoGradGuard or
//     inside no_sync(): no), seen through a marker written into rank 1's buffers;
//   * a forward through operator-> that changed the buffers fails at the next backward, on every
//     rank, naming the fix, before any gradient is sent: the next step through the wrapper works.
// test_batchnorm_python.cpp holds the same against Python's DistributedDataParallel.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.h"
#include "ddp/error.h"
#include "multiprocess.h"

namespace ddp_buffers_tests {

// BatchNorm first: its running statistics depend on the data only, so the rule can be computed
// without the parameters.
struct FirstBnImpl : torch::nn::Module {
  FirstBnImpl() {
    bn = register_module("bn", torch::nn::BatchNorm1d(4));
    fc = register_module("fc", torch::nn::Linear(4, 1));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(bn(x)); }
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

torch::Tensor batch(int step, int rank) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * step + rank));
  return torch::randn({6, 4}, gen, torch::kFloat64) * (1.0 + rank) + 2.0 * rank;
}

// After each of 5 training steps, compare rank r's statistics with the rule run on one process:
// broadcast on, rank 0's statistics before the step updated with rank r's batch; off, rank r's own
// chain of batches.
int follow_the_rule(int rank, std::shared_ptr<ddp::ProcessGroup> pg, bool broadcast) {
  torch::manual_seed(5);
  auto net = std::make_shared<FirstBnImpl>();
  ddp::DdpOptions options;
  options.broadcast_buffers = broadcast;
  ddp::DistributedDataParallel<FirstBnImpl> model(net, pg, options);
  torch::optim::SGD opt(net->parameters(), 0.1);
  torch::Tensor chain_mean = torch::zeros({4}, torch::kFloat64), chain_var = torch::ones({4}, torch::kFloat64);
  double worst = 0;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    model(batch(step, rank)).pow(2).mean().backward();
    opt.step();
    auto mean = chain_mean.clone(), var = chain_var.clone();
    torch::batch_norm(batch(step, rank), {}, {}, mean, var, true, 0.1, 1e-5, false);
    worst = std::max({worst, (mean - net->bn->running_mean).abs().max().item<double>(),
                      (var - net->bn->running_var).abs().max().item<double>()});
    if (net->bn->num_batches_tracked.item<int64_t>() != step + 1) return 2;
    // The chain the next step starts from: rank 0's (broadcast) or this rank's own.
    torch::batch_norm(batch(step, broadcast ? 0 : rank), {}, {}, chain_mean, chain_var, true, 0.1, 1e-5, false);
  }
  std::printf("[rank %d] broadcast_buffers=%d: statistics vs the rule, max |diff| %.3g\n", rank, broadcast, worst);
  return worst <= 1e-12 ? 0 : 1;
}

TEST(DdpBuffers, EachForwardStartsFromRank0sBuffers) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return follow_the_rule(r, pg, true); }), 0);
}

TEST(DdpBuffers, WithoutBroadcastEachRankKeepsItsOwn) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return follow_the_rule(r, pg, false); }), 0);
}

// Which forwards broadcast. Before each forward rank 1's running mean is set to 100: after a
// forward that broadcast it holds rank 0's (near 0), otherwise 100 (eval) or about 90 (training).
int which_forwards_broadcast(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  torch::manual_seed(5);
  auto net = std::make_shared<FirstBnImpl>();
  ddp::DistributedDataParallel<FirstBnImpl> model(net, pg);
  auto x = batch(0, 0);  // the same batch everywhere: only the marker tells the ranks apart
  auto broadcast = [&](const std::function<void()>& forward) {
    if (rank == 1) {
      torch::NoGradGuard no_grad;
      net->bn->running_mean.fill_(100);
    }
    forward();
    return net->bn->running_mean.abs().max().item<double>() < 50;
  };
  auto train_step = [&] { model(x).sum().backward(); };
  auto eval_forward = [&] {
    torch::NoGradGuard no_grad;
    net->eval();
    model(x);
    net->train();
  };
  auto quiet_step = [&] {
    auto no_sync = model.no_sync();
    model(x).sum().backward();
  };
  const std::vector<std::pair<std::string, bool>> seen{
      {"first training forward", broadcast(train_step)},
      {"training forward after a training forward", broadcast(train_step)},
      {"first evaluation forward after training", broadcast(eval_forward)},
      {"second evaluation forward", broadcast(eval_forward)},
      {"training forward after an evaluation under NoGradGuard", broadcast(train_step)},
      {"no_sync() forward after a training forward", broadcast(quiet_step)},
      {"training forward after a no_sync() forward", broadcast(train_step)},
      {"training forward after that", broadcast(train_step)},
  };
  const std::vector<bool> pytorch{true, true, true, false, false, true, false, true};
  int wrong = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (rank == 1 && seen[i].second != pytorch[i]) {
      std::fprintf(stderr, "%s: broadcast %d, PyTorch's rule says %d\n", seen[i].first.c_str(), seen[i].second,
                   static_cast<int>(pytorch[i]));
      ++wrong;
    }
  }
  return wrong;
}

TEST(DdpBuffers, BroadcastsWhenPyTorchDoes) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return which_forwards_broadcast(r, pg); }), 0);
}

int forward_through_arrow(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  torch::manual_seed(5);
  auto net = std::make_shared<FirstBnImpl>();
  ddp::DistributedDataParallel<FirstBnImpl> model(net, pg);
  std::string message;
  try {
    model->forward(batch(0, rank)).sum().backward();
  } catch (const ddp::Error& e) {
    message = e.message() + " | " + e.hint();
  }
  if (message.find("without going through DistributedDataParallel") == std::string::npos ||
      message.find("ddp_model(x) or ddp_model.forward(x)") == std::string::npos) {
    std::fprintf(stderr, "[rank %d] expected the skipped-broadcast error, got: '%s'\n", rank, message.c_str());
    return 1;
  }
  // Nothing was sent: the next step through the wrapper runs, and averages as usual.
  net->zero_grad();
  model(batch(1, rank)).sum().backward();
  std::vector<torch::Tensor> grad{net->fc->weight.grad().clone()};
  pg->broadcast(grad, 0);
  return torch::equal(grad[0], net->fc->weight.grad()) ? 0 : 2;
}

TEST(DdpBuffers, ForwardThroughArrowFailsAtBackwardNamingTheFix) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return forward_through_arrow(r, pg); }), 0);
}

// Evaluation through operator-> cannot be caught (it changes no buffer); sync_buffers() gives it
// rank 0's statistics.
int evaluate_after_sync_buffers(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  torch::manual_seed(5);
  auto net = std::make_shared<FirstBnImpl>();
  ddp::DistributedDataParallel<FirstBnImpl> model(net, pg);
  model(batch(0, rank)).sum().backward();  // each rank's statistics now hold its own batch
  model.sync_buffers();
  std::vector<torch::Tensor> rank0{net->bn->running_var.clone()};
  pg->broadcast(rank0, 0);
  return torch::equal(rank0[0], net->bn->running_var) ? 0 : 1;
}

TEST(DdpBuffers, SyncBuffersGivesEveryRankRank0s) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return evaluate_after_sync_buffers(r, pg); }), 0);
}

}  // namespace ddp_buffers_tests
