// train_single — a plain LibTorch training loop in one process: a linear model learns y = x·w + 0.5
// from 2048 samples by SGD. train_ddp.cpp is the same program made distributed with the ddpw
// library; `diff train_single.cpp train_ddp.cpp` is what that takes (docs/library.md opens with it).
#include <torch/torch.h>

#include <cstdio>

int main() {
  const int64_t batch_size = 32;
  torch::manual_seed(0);
  const auto inputs = torch::rand({2048, 20});
  const auto targets = inputs.matmul(torch::linspace(-1, 1, 20)).unsqueeze(1) + 0.5;
  auto model = torch::nn::Linear(20, 1);
  torch::optim::SGD optimizer(model->parameters(), /*lr=*/0.05);

  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    const auto order = torch::randperm(inputs.size(0));  // a new shuffle every epoch
    torch::Tensor loss;
    for (int64_t start = 0; start < order.size(0); start += batch_size) {
      const auto batch = order.slice(0, start, start + batch_size);
      optimizer.zero_grad();
      loss = torch::mse_loss(model->forward(inputs.index_select(0, batch)), targets.index_select(0, batch));
      loss.backward();
      optimizer.step();
    }
    std::printf("epoch %lld: last batch's loss %.6f\n", static_cast<long long>(epoch), loss.item<double>());
  }

  double checksum = 0;  // position-weighted: a swapped pair of values changes it too
  for (const auto& p : model->parameters())
    checksum +=
        (p.flatten().to(torch::kFloat64) * torch::arange(1, p.numel() + 1, torch::kFloat64)).sum().item<double>();
  std::printf("final weights checksum %.17g\n", checksum);
}
