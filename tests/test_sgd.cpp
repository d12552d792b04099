// ddp::Sgd: its multi-tensor (foreach) step against torch::optim::SGD's per-tensor step for every
// option (weight decay, momentum, dampening, Nesterov), against numbers torch.optim.SGD(foreach=True)
// produced, and its snapshots against torch::optim::SGD's (the same format, both ways).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <vector>

#include "ddp/sgd.h"

namespace {

// A least-squares problem in double precision plus a float32 parameter (two dtype groups) and one
// that never gets a gradient. Fixed values, no RNG.
struct SgdProblem {
  torch::Tensor w = torch::tensor({0.5, -0.3, 0.1, 0.2, -0.4, 0.7}, torch::kFloat64).reshape({3, 2}).requires_grad_();
  torch::Tensor b = torch::tensor({0.05, -0.02}, torch::kFloat64).requires_grad_();
  torch::Tensor v = torch::tensor({0.3f, -0.7f, 1.1f}).requires_grad_();
  torch::Tensor frozen = torch::ones({2}, torch::kFloat64).requires_grad_();
  torch::Tensor x =
      torch::tensor({1.0, 2.0, -1.0, 0.5, -0.5, 2.0, -1.5, 1.0, 0.25, 2.0, 0.0, 1.0}, torch::kFloat64).reshape({4, 3});
  torch::Tensor y = torch::tensor({1.0, 0.0, 0.0, 1.0, -1.0, 0.5, 0.5, -0.5}, torch::kFloat64).reshape({4, 2});

  std::vector<torch::Tensor> least_squares() { return {w, b}; }
  std::vector<torch::Tensor> all() { return {w, v, b, frozen}; }
  void compute_gradients(bool with_v) {
    for (auto& p : all()) p.mutable_grad() = torch::Tensor();
    auto loss = (torch::matmul(x, w) + b - y).pow(2).mean();
    if (with_v) loss = loss + (v * v).sum().to(torch::kFloat64) * 0.5;
    loss.backward();
  }
};

double worst_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i].to(torch::kFloat64) - b[i].to(torch::kFloat64)).abs().max().item<double>());
  return worst;
}

std::vector<torch::optim::SGDOptions> every_kind_of_sgd() {
  return {torch::optim::SGDOptions(0.1), torch::optim::SGDOptions(0.1).weight_decay(0.01),
          torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01),
          torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01)};
}

// The multi-tensor step (what runs on a GPU) computes what torch::optim::SGD computes.
TEST(Sgd, MultiTensorStepEqualsTorchSgdInFloat64) {
  for (const auto& options : every_kind_of_sgd()) {
    SgdProblem multi, single;
    ddp::Sgd foreach_opt(multi.all(), options);
    foreach_opt.set_foreach(true);
    torch::optim::SGD reference(single.all(), options);
    for (int step = 0; step < 8; ++step) {
      // v first gets a gradient at step 1 (its momentum buffer starts later than the others': the
      // step mixes new and existing buffers), and none at step 4.
      const bool with_v = step != 0 && step != 4;
      multi.compute_gradients(with_v);
      foreach_opt.step();
      single.compute_gradients(with_v);
      reference.step();
      EXPECT_LE(worst_difference(multi.all(), single.all()), 1e-12)
          << "momentum " << options.momentum() << ", nesterov " << options.nesterov() << ", step " << step;
    }
    EXPECT_TRUE(torch::equal(multi.frozen, torch::ones({2}, torch::kFloat64)));
    EXPECT_FALSE(torch::equal(multi.v, SgdProblem().v)) << "the float32 group did not move";
    EXPECT_EQ(foreach_opt.state().size(), reference.state().size());  // momentum buffers, or none
  }
}

// make_capturable (CudaGraphStep): the multi-tensor step with the rate read from a device tensor.
// Rates that are powers of two give the multi-tensor host-scalar step's numbers bit for bit (momentum
// and Nesterov too: the buffers are not scaled in place); a rate written into the tensor is what moves.
TEST(Sgd, CapturableStepReadsTheRateFromItsTensor) {
  const std::vector<torch::optim::SGDOptions> kinds = {
      torch::optim::SGDOptions(0.125).weight_decay(0.01),
      torch::optim::SGDOptions(0.125).momentum(0.9).dampening(0.1).weight_decay(0.01),
      torch::optim::SGDOptions(0.0625).momentum(0.9).nesterov(true)};
  for (const auto& options : kinds) {
    SgdProblem graphable, plain;
    ddp::Sgd capturable(graphable.all(), options), host(plain.all(), options);
    host.set_foreach(true);
    capturable.make_capturable();  // on the CPU too: the multi-tensor step
    EXPECT_EQ(capturable.device_lr(0).item<double>(), -options.lr());
    for (int step = 0; step < 6; ++step) {
      if (step == 3) {  // a schedule: the host rate, then its tensor at the next step
        capturable.param_groups()[0].options().set_lr(options.lr() / 2);
        host.param_groups()[0].options().set_lr(options.lr() / 2);
      }
      graphable.compute_gradients(true);
      capturable.step();
      plain.compute_gradients(true);
      host.step();
      for (size_t i = 0; i < plain.all().size(); ++i)
        EXPECT_TRUE(torch::equal(graphable.all()[i], plain.all()[i]))
            << "momentum " << options.momentum() << ", step " << step << ", parameter " << i;
    }
    EXPECT_EQ(capturable.device_lr(0).item<double>(), -options.lr() / 2);
    capturable.device_lr(0).fill_(0.0);  // the host still says lr / 2
    const auto before = graphable.w.detach().clone();
    graphable.compute_gradients(true);
    capturable.step();
    EXPECT_TRUE(torch::equal(graphable.w, before)) << "the step used the host rate";
  }
}

// On the CPU, as torch.optim decides with foreach=None, the step is torch::optim::SGD's own.
TEST(Sgd, OnTheCpuItIsTorchSgdBitForBit) {
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01);
  SgdProblem mine, theirs;
  ddp::Sgd sgd(mine.all(), options);
  torch::optim::SGD reference(theirs.all(), options);
  for (int step = 0; step < 5; ++step) {
    mine.compute_gradients(true);
    sgd.step();
    theirs.compute_gradients(true);
    reference.step();
  }
  for (size_t i = 0; i < mine.all().size(); ++i) EXPECT_TRUE(torch::equal(mine.all()[i], theirs.all()[i])) << i;
}

// Produced with PyTorch 2.11.0 by:
//   python3 - <<'EOF'
//   import torch
//   torch.set_default_dtype(torch.float64)
//   def run(make):
//       w = torch.tensor([[0.5, -0.3], [0.1, 0.2], [-0.4, 0.7]], requires_grad=True)
//       b = torch.tensor([0.05, -0.02], requires_grad=True)
//       x = torch.tensor([[1.0, 2.0, -1.0], [0.5, -0.5, 2.0], [-1.5, 1.0, 0.25], [2.0, 0.0, 1.0]])
//       y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5], [0.5, -0.5]])
//       opt = make([w, b])
//       for step in range(5):
//           opt.zero_grad()
//           ((x @ w + b - y) ** 2).mean().backward()
//           opt.step()
//       print(w.detach().flatten().tolist(), b.detach().tolist())
//   run(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=True))
//   run(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True, foreach=True))
//   EOF
// (foreach=False prints the same numbers.)
TEST(Sgd, MultiTensorStepMatchesPyTorchForeachAfterFiveSteps) {
  struct Case {
    torch::optim::SGDOptions options;
    std::vector<double> w, b;
  };
  const std::vector<Case> cases = {
      {torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01),
       {0.5343759230503589, -0.2893595414774649, -0.06137853187258354, 0.3831992540228309, -0.20826121948276982,
        0.4094674602344922},
       {0.029450573294965716, -0.10059532020838999}},
      {torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01),
       {0.5222984360197095, -0.26213933785786364, -0.04203631445026869, 0.3645769054576259, -0.2259168676622659,
        0.4361734830853607},
       {0.02229708709204113, -0.1034908010159139}},
  };
  for (const auto& c : cases) {
    SgdProblem problem;
    ddp::Sgd sgd(problem.least_squares(), c.options);
    sgd.set_foreach(true);
    for (int step = 0; step < 5; ++step) {
      problem.compute_gradients(false);
      sgd.step();
    }
    EXPECT_TRUE(torch::allclose(problem.w.flatten(), torch::tensor(c.w, torch::kFloat64), 1e-12, 1e-14))
        << "nesterov " << c.options.nesterov() << ": " << problem.w;
    EXPECT_TRUE(torch::allclose(problem.b, torch::tensor(c.b, torch::kFloat64), 1e-12, 1e-14))
        << "nesterov " << c.options.nesterov() << ": " << problem.b;
  }
}

// A snapshot of ddp::Sgd loads into torch::optim::SGD and the other way round: the momentum
// buffers carry over, and training goes on bit-identically.
TEST(Sgd, SnapshotsAreTorchSgdSnapshots) {
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  SgdProblem original, resumed;
  ddp::Sgd sgd(original.least_squares(), options);
  sgd.set_foreach(true);
  for (int step = 0; step < 3; ++step) {
    original.compute_gradients(false);
    sgd.step();
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    sgd.save(archive);
    archive.save_to(saved);
  }
  {
    torch::NoGradGuard no_grad;
    resumed.w.copy_(original.w);
    resumed.b.copy_(original.b);
  }
  torch::optim::SGD plain(resumed.least_squares(), options);
  {
    torch::serialize::InputArchive archive;
    archive.load_from(saved);
    plain.load(archive);
  }
  ASSERT_EQ(plain.state().size(), 2u);
  ddp::Sgd again(resumed.least_squares(), options);  // and back into ddp::Sgd
  {
    std::stringstream second;
    torch::serialize::OutputArchive out;
    plain.save(out);
    out.save_to(second);
    torch::serialize::InputArchive in;
    in.load_from(second);
    again.load(in);
  }
  again.set_foreach(true);
  for (int step = 0; step < 3; ++step) {
    original.compute_gradients(false);
    sgd.step();
    resumed.compute_gradients(false);
    again.step();
    EXPECT_TRUE(torch::equal(original.w, resumed.w)) << "step " << step;
    EXPECT_TRUE(torch::equal(original.b, resumed.b)) << "step " << step;
  }
}

}  // namespace
