// The course's models: parameter names (snapshot keys), shapes, and the CNN's output against
// PyTorch's own pytorch/examples MNIST Net with the same weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "course/models.h"

namespace {

std::vector<std::string> parameter_names(torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

TEST(LinearRegressor, IsOneLinearLayer) {
  ddpw::LinearRegressor model(20);
  EXPECT_EQ(parameter_names(model), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  const auto out = model.forward(torch::ones({5, 20}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{5, 1}));
  const auto expected =
      torch::ones({5, 20}).matmul(model.named_parameters()["fc.weight"].t()) + model.named_parameters()["fc.bias"];
  EXPECT_TRUE(torch::allclose(out, expected));
}

TEST(MnistCnn, HasTheSeedsLayers) {
  ddpw::MnistCnn model;
  EXPECT_EQ(parameter_names(model),
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                      "fc1.bias", "fc2.weight", "fc2.bias"}));
  int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  EXPECT_EQ(count, 1199882);  // 320 + 18496 + 1179776 + 1290, as the Python Net
}

TEST(MnistCnn, OutputsLogProbabilities) {
  torch::manual_seed(0);
  ddpw::MnistCnn model;
  model.eval();
  const auto out = model.forward(torch::rand({3, 1, 28, 28}));
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 10}));
  EXPECT_TRUE(torch::allclose(out.exp().sum(1), torch::ones({3})));
}

TEST(MnistCnn, DropoutOnlyWhileTraining) {
  torch::manual_seed(0);
  ddpw::MnistCnn model;
  const auto x = torch::rand({4, 1, 28, 28});
  model.eval();
  EXPECT_TRUE(torch::equal(model.forward(x), model.forward(x)));
  model.train();
  EXPECT_FALSE(torch::equal(model.forward(x), model.forward(x)));
}

// Produced with PyTorch 2.11.0 (the Net class of pytorch/examples mnist/main.py) by:
//   python3 - <<'EOF'
//   import torch, torch.nn as nn, torch.nn.functional as F
//   torch.set_default_dtype(torch.float64)
//   class Net(nn.Module):  # pytorch/examples mnist/main.py
//       def __init__(self):
//           super().__init__()
//           self.conv1 = nn.Conv2d(1, 32, 3, 1); self.conv2 = nn.Conv2d(32, 64, 3, 1)
//           self.dropout1 = nn.Dropout(0.25); self.dropout2 = nn.Dropout(0.5)
//           self.fc1 = nn.Linear(9216, 128); self.fc2 = nn.Linear(128, 10)
//       def forward(self, x):
//           x = F.relu(self.conv1(x)); x = F.relu(self.conv2(x)); x = F.max_pool2d(x, 2)
//           x = self.dropout1(x); x = torch.flatten(x, 1); x = F.relu(self.fc1(x))
//           x = self.dropout2(x); x = self.fc2(x); return F.log_softmax(x, dim=1)
//   net = Net().eval()
//   with torch.no_grad():
//       for k, (name, p) in enumerate(net.named_parameters()):
//           p.copy_(0.05 * torch.sin(torch.arange(p.numel()) * 0.37 + k).reshape(p.shape))
//       x = torch.cos(torch.arange(2 * 784) * 0.01).reshape(2, 1, 28, 28)
//       print(net(x).flatten().tolist())
//   EOF
TEST(MnistCnn, MatchesThePythonNet) {
  ddpw::MnistCnn model;
  model.to(torch::kFloat64);
  model.eval();
  {
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : model.parameters()) {
      p.copy_(0.05 * torch::sin(torch::arange(p.numel(), torch::kFloat64) * 0.37 + k).reshape(p.sizes()));
      ++k;
    }
  }
  const auto x = torch::cos(torch::arange(2 * 784, torch::kFloat64) * 0.01).reshape({2, 1, 28, 28});
  const auto expected =
      torch::tensor(
          {-2.2477090742048067, -2.3165751705925306, -2.265595101428027,  -2.275221872280991,  -2.3124545369823224,
           -2.260337845254568,  -2.375245358210746,  -2.268735880373842,  -2.430991732569199,  -2.2878078923699197,
           -2.246864041738661,  -2.317630876926884,  -2.2644474719291656, -2.2764579136032275, -2.3112588412420854,
           -2.2614870168990744, -2.3742666477107406, -2.269549991622153,  -2.4304475652812485, -2.288112090183991},
          torch::kFloat64)
          .reshape({2, 10});
  const auto out = model.forward(x);
  EXPECT_TRUE(torch::allclose(out, expected, 1e-10, 1e-12)) << out << "\nexpected\n" << expected;
}

}  // namespace
