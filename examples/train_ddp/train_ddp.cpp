// train_ddp — train_single.cpp made distributed with the ddpw library: one process per rank, started
// by a launcher (torchrun, mpirun, srun); each trains on its shard of every epoch, and
// DistributedDataParallel averages the gradients, so every rank ends with the same weights.
//   torchrun --standalone --nproc_per_node=2 --no-python ./train_ddp
#include <torch/torch.h>

#include <cstdio>

#include "ddp/data.h"                       // DistributedSampler: each rank's shard of every epoch's shuffle
#include "ddp/distributed_data_parallel.h"  // DistributedDataParallel
#include "ddp/launch_env.h"                 // resolve_launch_env: rank and world size from the launcher
#include "ddp/process.h"                    // configure_process: SIGPIPE, NCCL's error handling, ...
#include "ddp/process_group.h"              // init_process_group: rendezvous, then Gloo (CPU) or NCCL

int main() {
  ddp::configure_process();
  const ddp::LaunchEnv launch = ddp::resolve_launch_env(ddp::current_environment());
  auto pg = ddp::init_process_group(launch, torch::kCPU);
  const int64_t batch_size = 32 / launch.world_size;  // per rank: 32 samples a step in all, as before
  torch::manual_seed(0);
  const auto inputs = torch::rand({2048, 20});
  const auto targets = inputs.matmul(torch::linspace(-1, 1, 20)).unsqueeze(1) + 0.5;
  auto model = ddp::DistributedDataParallel(torch::nn::Linear(20, 1).ptr(), pg);  // backward() averages gradients
  torch::optim::SGD optimizer(model->parameters(), /*lr=*/0.05);
  ddp::DistributedSampler sampler(inputs.size(0), launch.world_size, launch.global_rank);

  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    sampler.set_epoch(epoch);  // a new shuffle every epoch, cut into one shard per rank
    const auto order = sampler.indices();
    torch::Tensor loss;
    for (int64_t start = 0; start < order.size(0); start += batch_size) {
      const auto batch = order.slice(0, start, start + batch_size);
      optimizer.zero_grad();
      loss = torch::mse_loss(model->forward(inputs.index_select(0, batch)), targets.index_select(0, batch));
      loss.backward();
      optimizer.step();
    }
    if (launch.global_rank == 0)
      std::printf("epoch %lld: last batch's loss %.6f\n", static_cast<long long>(epoch), loss.item<double>());
  }

  double checksum = 0;  // position-weighted: a swapped pair of values changes it too
  for (const auto& p : model->parameters())
    checksum +=
        (p.flatten().to(torch::kFloat64) * torch::arange(1, p.numel() + 1, torch::kFloat64)).sum().item<double>();
  std::printf("rank %d final weights checksum %.17g\n", launch.global_rank, checksum);
}
