// ddp::adam_step (multi-tensor Adam/AdamW) in float64: bit for bit the numbers PyTorch's
// torch.optim.AdamW / Adam produce, and within rounding of LibTorch's own per-tensor
// torch::optim::AdamW / Adam over many steps on a model of several layers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "ddp/multi_tensor_adam.h"

// A named namespace, not an anonymous one: the test files are compiled in batches (unity build).
namespace multi_tensor_adam {

// A small least-squares problem in double precision, fixed values (no RNG): as test_adadelta.cpp.
struct Problem {
  torch::Tensor w = torch::tensor({0.5, -0.3, 0.1, 0.2, -0.4, 0.7}, torch::kFloat64).reshape({3, 2}).requires_grad_();
  torch::Tensor b = torch::tensor({0.05, -0.02}, torch::kFloat64).requires_grad_();
  torch::Tensor x =
      torch::tensor({1.0, 2.0, -1.0, 0.5, -0.5, 2.0, -1.5, 1.0, 0.25, 2.0, 0.0, 1.0}, torch::kFloat64).reshape({4, 3});
  torch::Tensor y = torch::tensor({1.0, 0.0, 0.0, 1.0, -1.0, 0.5, 0.5, -0.5}, torch::kFloat64).reshape({4, 2});

  std::vector<torch::Tensor> params() { return {w, b}; }
  void compute_gradients() {
    for (auto& p : params()) p.mutable_grad() = torch::Tensor();
    (torch::matmul(x, w) + b - y).pow(2).mean().backward();
  }
};

// The optimizer state adam_step works on, for whole parameters.
struct Moments {
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;
  explicit Moments(const std::vector<torch::Tensor>& params) {
    for (const auto& p : params) {
      exp_avg.push_back(torch::zeros_like(p));
      exp_avg_sq.push_back(torch::zeros_like(p));
    }
  }
};

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> g;
  for (const auto& p : params) g.push_back(p.grad());
  return g;
}

std::vector<double> values(Problem& p) {
  std::vector<double> v;
  for (const auto& t : p.params()) {
    auto flat = t.detach().flatten();
    for (int64_t i = 0; i < flat.numel(); ++i) v.push_back(flat[i].item<double>());
  }
  return v;
}

// Produced with PyTorch 2.11.0 (foreach=True and foreach=False give the same numbers) by:
//   python3 - <<'EOF'
//   import torch
//   torch.set_default_dtype(torch.float64)
//   w = torch.tensor([[0.5, -0.3], [0.1, 0.2], [-0.4, 0.7]], requires_grad=True)
//   b = torch.tensor([0.05, -0.02], requires_grad=True)
//   x = torch.tensor([[1.0, 2.0, -1.0], [0.5, -0.5, 2.0], [-1.5, 1.0, 0.25], [2.0, 0.0, 1.0]])
//   y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5], [0.5, -0.5]])
//   opt = torch.optim.AdamW([w, b], lr=0.01, betas=(0.8, 0.999), eps=1e-8, weight_decay=0.05, foreach=True)
//   for step in range(5):
//       opt.zero_grad()
//       ((x @ w + b - y) ** 2).mean().backward()
//       opt.step()
//   print([repr(v) for v in w.detach().flatten().tolist() + b.detach().tolist()])
//   EOF
// and the same with torch.optim.Adam (weight decay added to the gradient).
const std::vector<double> kPyTorchAdamW = {0.5425852413502332,  -0.3137938039995434, 0.0514425381545804,
                                           0.24884368630611506, -0.3500919609188127, 0.6492945341681104,
                                           0.01592057575384008, -0.0679169573737017};
const std::vector<double> kPyTorchAdam = {0.5346943973873757,   -0.29811122879927004, 0.051630992525359916,
                                          0.24932797124079953,  -0.3509365229165188,  0.6508419661192894,
                                          0.015142981077075898, -0.0682705467405755};

std::vector<double> five_steps(bool decoupled) {
  Problem problem;
  Moments m(problem.params());
  ddp::AdamOptions o{0.01, 0.8, 0.999, 1e-8, 0.05, decoupled};
  for (int64_t step = 1; step <= 5; ++step) {
    problem.compute_gradients();
    ddp::adam_step(problem.params(), grads_of(problem.params()), m.exp_avg, m.exp_avg_sq, step, o);
  }
  return values(problem);
}

TEST(MultiTensorAdam, AdamWEqualsPyTorchBitForBit) {
  const auto mine = five_steps(true);
  ASSERT_EQ(mine.size(), kPyTorchAdamW.size());
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], kPyTorchAdamW[i]) << "element " << i;
}

TEST(MultiTensorAdam, AdamEqualsPyTorchBitForBit) {
  const auto mine = five_steps(false);
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], kPyTorchAdam[i]) << "element " << i;
}

struct NetImpl : torch::nn::Module {
  NetImpl() {
    l1 = register_module("l1", torch::nn::Linear(7, 16));
    l2 = register_module("l2", torch::nn::Linear(16, 16));
    l3 = register_module("l3", torch::nn::Linear(16, 3));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return l3(torch::tanh(l2(torch::tanh(l1(x))))); }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
};

double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

// 30 steps on 6 parameter tensors against LibTorch's own per-tensor optimizers. They compute the
// first moment as m * beta1 + g * (1 - beta1) where PyTorch's Python lerps: rounding differs
// slightly, so this bound is a relative 1e-12, not bit equality.
void compare_with_libtorch(bool decoupled) {
  torch::manual_seed(5);
  auto mine = std::make_shared<NetImpl>();
  torch::manual_seed(5);
  auto theirs = std::make_shared<NetImpl>();
  ddp::AdamOptions o{2e-3, 0.8, 0.999, 1e-8, 0.01, decoupled};
  std::unique_ptr<torch::optim::Optimizer> reference;
  if (decoupled)
    reference = std::make_unique<torch::optim::AdamW>(
        theirs->parameters(),
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  else
    reference = std::make_unique<torch::optim::Adam>(
        theirs->parameters(),
        torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  Moments m(mine->parameters());
  auto gen = at::detail::createCPUGenerator(11);
  for (int64_t step = 1; step <= 30; ++step) {
    auto x = torch::randn({12, 7}, gen, torch::kFloat64);
    auto y = torch::randn({12, 3}, gen, torch::kFloat64);
    mine->zero_grad();
    reference->zero_grad();
    torch::mse_loss(mine->forward(x), y).backward();
    torch::mse_loss(theirs->forward(x), y).backward();
    ddp::adam_step(mine->parameters(), grads_of(mine->parameters()), m.exp_avg, m.exp_avg_sq, step, o);
    reference->step();
  }
  const double diff = max_difference(*mine, *theirs);
  std::printf("%s: max |ddp::adam_step - LibTorch| = %.3g after 30 steps\n", decoupled ? "AdamW" : "Adam", diff);
  EXPECT_LE(diff, 1e-12);
  torch::manual_seed(5);
  NetImpl untouched;
  EXPECT_GT(max_difference(*mine, untouched), 1e-3) << "the parameters hardly moved: the comparison means nothing";
}

TEST(MultiTensorAdam, AdamWMatchesLibTorchAdamW) { compare_with_libtorch(true); }
TEST(MultiTensorAdam, AdamMatchesLibTorchAdam) { compare_with_libtorch(false); }

TEST(MultiTensorAdam, L2DecayLeavesTheGradientAlone) {
  Problem problem;
  Moments m(problem.params());
  problem.compute_gradients();
  const auto before = problem.w.grad().clone();
  ddp::adam_step(problem.params(), grads_of(problem.params()), m.exp_avg, m.exp_avg_sq, 1,
                 ddp::AdamOptions{0.01, 0.9, 0.999, 1e-8, 0.5, false});
  EXPECT_TRUE(torch::equal(problem.w.grad(), before));
}

}  // namespace multi_tensor_adam
