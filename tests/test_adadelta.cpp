// ddp::Adadelta against torch.optim.Adadelta's update rule, written out here with plain tensors,
// against numbers PyTorch itself produced, through a save/load round trip, and its multi-tensor
// (foreach) step against its per-tensor one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <vector>

#include "ddp/adadelta.h"
#include "ddp/detail/optimizer_helpers.h"
#include "ddp/error.h"

namespace {

// A small least-squares problem in double precision, fixed values (no RNG).
struct Problem {
  torch::Tensor w = torch::tensor({0.5, -0.3, 0.1, 0.2, -0.4, 0.7}, torch::kFloat64).reshape({3, 2}).requires_grad_();
  torch::Tensor b = torch::tensor({0.05, -0.02}, torch::kFloat64).requires_grad_();
  torch::Tensor x =
      torch::tensor({1.0, 2.0, -1.0, 0.5, -0.5, 2.0, -1.5, 1.0, 0.25, 2.0, 0.0, 1.0}, torch::kFloat64).reshape({4, 3});
  torch::Tensor y = torch::tensor({1.0, 0.0, 0.0, 1.0, -1.0, 0.5, 0.5, -0.5}, torch::kFloat64).reshape({4, 2});

  std::vector<torch::Tensor> params() { return {w, b}; }
  torch::Tensor loss() { return (torch::matmul(x, w) + b - y).pow(2).mean(); }
  void compute_gradients() {
    for (auto& p : params()) p.mutable_grad() = torch::Tensor();
    loss().backward();
  }
};

// torch.optim.Adadelta (docs' algorithm box), one parameter, nothing in place:
//   g  = grad + weight_decay * p
//   v  = rho * v + (1 - rho) * g^2
//   dx = sqrt(u + eps) / sqrt(v + eps) * g
//   u  = rho * u + (1 - rho) * dx^2
//   p  = p - lr * dx
struct ReferenceAdadelta {
  double lr, rho, eps, weight_decay;
  std::vector<torch::Tensor> v{}, u{};

  void step(std::vector<torch::Tensor> params) {
    torch::NoGradGuard no_grad;
    if (v.empty())
      for (auto& p : params) {
        v.push_back(torch::zeros_like(p));
        u.push_back(torch::zeros_like(p));
      }
    for (size_t i = 0; i < params.size(); ++i) {
      const auto g = params[i].grad() + weight_decay * params[i];
      v[i] = rho * v[i] + (1 - rho) * g * g;
      const auto dx = torch::sqrt(u[i] + eps) / torch::sqrt(v[i] + eps) * g;
      u[i] = rho * u[i] + (1 - rho) * dx * dx;
      params[i].sub_(lr * dx);
    }
  }
};

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, const char* what) {
  EXPECT_TRUE(torch::allclose(actual, expected, /*rtol=*/1e-12, /*atol=*/1e-14)) << what << "\nactual:\n"
                                                                                 << actual << "\nexpected:\n"
                                                                                 << expected;
}

TEST(Adadelta, FollowsTheUpdateRuleStepByStep) {
  for (double weight_decay : {0.0, 0.1}) {
    Problem mine, reference;
    ddp::Adadelta optimizer(mine.params(), ddp::AdadeltaOptions(0.5).rho(0.9).eps(1e-6).weight_decay(weight_decay));
    ReferenceAdadelta rule{0.5, 0.9, 1e-6, weight_decay};
    for (int step = 0; step < 6; ++step) {
      mine.compute_gradients();
      optimizer.step();
      reference.compute_gradients();
      rule.step(reference.params());
      expect_close(mine.w, reference.w, "w");
      expect_close(mine.b, reference.b, "b");
    }
    EXPECT_FALSE(torch::equal(mine.w, Problem().w)) << "the optimizer did not move the weights";
    EXPECT_LT(mine.loss().item<double>(), Problem().loss().item<double>());
  }
}

// Produced with PyTorch 2.11.0 by:
//   python3 - <<'EOF'
//   import torch
//   torch.set_default_dtype(torch.float64)
//   w = torch.tensor([[0.5, -0.3], [0.1, 0.2], [-0.4, 0.7]], requires_grad=True)
//   b = torch.tensor([0.05, -0.02], requires_grad=True)
//   x = torch.tensor([[1.0, 2.0, -1.0], [0.5, -0.5, 2.0], [-1.5, 1.0, 0.25], [2.0, 0.0, 1.0]])
//   y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5], [0.5, -0.5]])
//   opt = torch.optim.Adadelta([w, b], lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.01, foreach=False)
//   for step in range(5):
//       opt.zero_grad()
//       ((x @ w + b - y) ** 2).mean().backward()
//       opt.step()
//   print(w.detach().flatten().tolist(), b.detach().tolist())
//   EOF
TEST(Adadelta, MatchesPyTorchAfterFiveSteps) {
  Problem problem;
  ddp::Adadelta optimizer(problem.params(), ddp::AdadeltaOptions(1.0).weight_decay(0.01));
  for (int step = 0; step < 5; ++step) {
    problem.compute_gradients();
    optimizer.step();
  }
  const auto w = torch::tensor({0.5145081968555253, -0.3101385085852228, 0.08432386967606534, 0.21607944174069782,
                                -0.38409430530160027, 0.6840850140337893},
                               torch::kFloat64)
                     .reshape({3, 2});
  const auto b = torch::tensor({0.036814038131402146, -0.03551905364627372}, torch::kFloat64);
  expect_close(problem.w, w, "w after 5 steps");
  expect_close(problem.b, b, "b after 5 steps");
}

TEST(Adadelta, LearningRateIsSetThroughTheParamGroup) {
  Problem mine, reference;
  ddp::Adadelta optimizer(mine.params(), 1.0);
  ReferenceAdadelta rule{1.0, 0.9, 1e-6, 0.0};
  for (int step = 0; step < 4; ++step) {
    if (step == 2) {  // what a StepLR-style schedule does between epochs
      optimizer.param_groups()[0].options().set_lr(0.25);
      rule.lr = 0.25;
    }
    mine.compute_gradients();
    optimizer.step();
    reference.compute_gradients();
    rule.step(reference.params());
  }
  EXPECT_DOUBLE_EQ(optimizer.param_groups()[0].options().get_lr(), 0.25);
  expect_close(mine.w, reference.w, "w");
  expect_close(mine.b, reference.b, "b");
}

TEST(Adadelta, SkipsParametersWithoutGradient) {
  Problem problem;
  auto frozen = torch::ones({2}, torch::kFloat64).requires_grad_();
  ddp::Adadelta optimizer({problem.w, problem.b, frozen}, 1.0);
  problem.compute_gradients();
  optimizer.step();
  EXPECT_TRUE(torch::equal(frozen, torch::ones({2}, torch::kFloat64)));
  EXPECT_EQ(optimizer.state_of(frozen), nullptr);  // state only for parameters that had a gradient
  EXPECT_NE(optimizer.state_of(problem.w), nullptr);
  EXPECT_EQ(optimizer.state().size(), 2u);
}

TEST(Adadelta, SaveAndLoadContinueBitIdentically) {
  Problem original;
  ddp::Adadelta optimizer(original.params(), 1.0);
  for (int step = 0; step < 3; ++step) {
    original.compute_gradients();
    optimizer.step();
  }
  optimizer.param_groups()[0].options().set_lr(0.7);

  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to(saved);
  }

  // A new process would rebuild the model from its own snapshot: same values, new tensors.
  Problem resumed;
  {
    torch::NoGradGuard no_grad;
    resumed.w.copy_(original.w);
    resumed.b.copy_(original.b);
  }
  ddp::Adadelta restored(resumed.params(), 1.0);
  {
    torch::serialize::InputArchive archive;
    archive.load_from(saved);
    restored.load(archive);
  }
  EXPECT_DOUBLE_EQ(restored.param_groups()[0].options().get_lr(), 0.7);
  ASSERT_EQ(restored.state().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto* before = optimizer.state_of(original.params()[i]);
    const auto* after = restored.state_of(resumed.params()[i]);
    ASSERT_NE(before, nullptr);
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(after->step(), 3);
    EXPECT_TRUE(torch::equal(after->square_avg(), before->square_avg()));
    EXPECT_TRUE(torch::equal(after->acc_delta(), before->acc_delta()));
  }

  // The control: the same weights with a fresh optimizer (state lost) go elsewhere.
  Problem restarted;
  {
    torch::NoGradGuard no_grad;
    restarted.w.copy_(original.w);
    restarted.b.copy_(original.b);
  }
  ddp::Adadelta fresh(restarted.params(), 0.7);

  for (int step = 0; step < 4; ++step) {
    original.compute_gradients();
    optimizer.step();
    resumed.compute_gradients();
    restored.step();
    restarted.compute_gradients();
    fresh.step();
    EXPECT_TRUE(torch::equal(original.w, resumed.w)) << "step " << step;
    EXPECT_TRUE(torch::equal(original.b, resumed.b)) << "step " << step;
  }
  EXPECT_FALSE(torch::allclose(original.w, restarted.w)) << "the saved state made no difference";
}

// Parameters of two dtypes (so the multi-tensor step groups them) and one without a gradient.
struct MixedProblem {
  Problem p;
  torch::Tensor v = torch::tensor({0.3f, -0.7f, 1.1f}).requires_grad_();  // float32
  torch::Tensor frozen = torch::ones({2}, torch::kFloat64).requires_grad_();
  std::vector<torch::Tensor> params() { return {p.w, v, p.b, frozen}; }
  void compute_gradients() {
    for (auto& t : params()) t.mutable_grad() = torch::Tensor();
    (p.loss() + (v * v).sum().to(torch::kFloat64) * 0.5).backward();
  }
};

double max_param_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i].to(torch::kFloat64) - b[i].to(torch::kFloat64)).abs().max().item<double>());
  return worst;
}

// The multi-tensor step (what runs on a GPU) computes what the per-tensor step computes.
TEST(Adadelta, MultiTensorStepEqualsPerTensorStepInFloat64) {
  for (double weight_decay : {0.0, 0.1}) {
    MixedProblem multi, single;
    auto options = ddp::AdadeltaOptions(0.5).rho(0.9).eps(1e-6).weight_decay(weight_decay);
    ddp::Adadelta foreach_opt(multi.params(), options), per_tensor(single.params(), options);
    foreach_opt.set_foreach(true);
    per_tensor.set_foreach(false);
    for (int step = 0; step < 8; ++step) {
      if (step == 4) {  // a new learning rate between epochs reaches both
        foreach_opt.param_groups()[0].options().set_lr(0.25);
        per_tensor.param_groups()[0].options().set_lr(0.25);
      }
      multi.compute_gradients();
      foreach_opt.step();
      single.compute_gradients();
      per_tensor.step();
      const double diff = max_param_difference(multi.params(), single.params());
      EXPECT_LE(diff, 1e-12) << "weight decay " << weight_decay << ", step " << step;
    }
    EXPECT_TRUE(torch::equal(multi.frozen, torch::ones({2}, torch::kFloat64)));
    EXPECT_EQ(foreach_opt.state_of(multi.frozen), nullptr);
    ASSERT_NE(foreach_opt.state_of(multi.v), nullptr);
    EXPECT_EQ(foreach_opt.state_of(multi.v)->step(), 8);
    EXPECT_FALSE(torch::equal(multi.v, MixedProblem().v)) << "the float32 group did not move";
  }
}

// make_capturable (what CudaGraphStep calls): the rate is read from a 0-dim tensor on the device,
// refilled when the group's lr changes. With rates that are powers of two the steps equal the
// host-scalar steps bit for bit, in both kernels (the float32 parameter takes the float64 group's rate).
TEST(Adadelta, CapturableStepReadsTheRateFromItsTensor) {
  for (bool foreach : {true, false}) {
    MixedProblem graphable, plain;
    const auto options = ddp::AdadeltaOptions(0.5).rho(0.9).eps(1e-6).weight_decay(0.1);
    ddp::Adadelta capturable(graphable.params(), options), host(plain.params(), options);
    capturable.set_foreach(foreach);
    host.set_foreach(foreach);
    capturable.make_capturable();
    ASSERT_TRUE(capturable.capturable());
    EXPECT_EQ(capturable.device_lr(0).item<double>(), -0.5);
    for (int step = 0; step < 6; ++step) {
      if (step == 3) {  // a schedule between steps: the host rate, then its tensor before the next step
        capturable.param_groups()[0].options().set_lr(0.25);
        host.param_groups()[0].options().set_lr(0.25);
        capturable.update_device_lr();
        EXPECT_EQ(capturable.device_lr(0).item<double>(), -0.25);
      }
      graphable.compute_gradients();
      capturable.step();
      plain.compute_gradients();
      host.step();
      for (size_t i = 0; i < plain.params().size(); ++i)
        EXPECT_TRUE(torch::equal(graphable.params()[i], plain.params()[i]))
            << "foreach " << foreach << ", step " << step;
    }
    // A replay runs no host code: the host counts it afterwards.
    const int64_t steps = capturable.state_of(graphable.v)->step();
    capturable.count_replayed_step();
    EXPECT_EQ(capturable.state_of(graphable.v)->step(), steps + 1);
    // The step reads the tensor, not the host number: a rate of 0 written there (the host still says
    // 0.25) leaves the parameters where they are.
    capturable.device_lr(0).fill_(0.0);
    const auto before = graphable.v.detach().clone();
    graphable.compute_gradients();
    capturable.step();
    EXPECT_TRUE(torch::equal(graphable.v, before)) << "foreach " << foreach << ": the step used the host rate";
  }
}

// torch.optim.Adadelta(..., foreach=True) gives the numbers of MatchesPyTorchAfterFiveSteps too
// (PyTorch 2.11.0, the script above with foreach=True; checked equal to foreach=False there).
TEST(Adadelta, MultiTensorStepMatchesPyTorchForeachAfterFiveSteps) {
  Problem problem;
  ddp::Adadelta optimizer(problem.params(), ddp::AdadeltaOptions(1.0).weight_decay(0.01));
  optimizer.set_foreach(true);
  for (int step = 0; step < 5; ++step) {
    problem.compute_gradients();
    optimizer.step();
  }
  const auto w = torch::tensor({0.5145081968555253, -0.3101385085852228, 0.08432386967606534, 0.21607944174069782,
                                -0.38409430530160027, 0.6840850140337893},
                               torch::kFloat64)
                     .reshape({3, 2});
  const auto b = torch::tensor({0.036814038131402146, -0.03551905364627372}, torch::kFloat64);
  expect_close(problem.w, w, "w after 5 steps");
  expect_close(problem.b, b, "b after 5 steps");
}

// As torch.optim decides with foreach=None: multi-tensor only when all parameters are on GPUs.
TEST(Adadelta, MultiTensorByDefaultOnlyOnGpus) {
  Problem problem;
  EXPECT_FALSE(ddp::optim_detail::use_foreach(std::nullopt, problem.params()));
  EXPECT_TRUE(ddp::optim_detail::use_foreach(true, problem.params()));
  EXPECT_FALSE(ddp::optim_detail::use_foreach(false, problem.params()));
  EXPECT_FALSE(ddp::optim_detail::use_foreach(std::nullopt, {}));
}

TEST(Adadelta, RejectsInvalidOptions) {
  Problem problem;
  EXPECT_THROW(ddp::Adadelta(problem.params(), -1.0), ddp::Error);
  EXPECT_THROW(ddp::Adadelta(problem.params(), 1.0, 1.5), ddp::Error);
  EXPECT_THROW(ddp::Adadelta(problem.params(), 1.0, 0.9, -1e-6), ddp::Error);
  EXPECT_THROW(ddp::Adadelta(problem.params(), 1.0, 0.9, 1e-6, -0.1), ddp::Error);
}

}  // namespace
