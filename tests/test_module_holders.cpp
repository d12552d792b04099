// Holder types: every wrapper takes a module the ways LibTorch hands one out, a holder
// (torch::nn::Sequential, a TORCH_MODULE(Net)) or an ...Impl in a std::shared_ptr, and trains it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel
#include "ddp/join.h"                       // defines: join, Join
#include "ddp/sharded_adamw.h"              // defines: ShardedAdamW
#include "ddp/sync_batch_norm.h"            // defines: convert_sync_batchnorm
#include "ddp/zero_data_parallel.h"         // defines: ZeroDataParallel
#include "multiprocess.h"                   // defines: run_ranks

namespace {

struct HolderNetImpl : torch::nn::Module {
  HolderNetImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(HolderNet);

torch::nn::Sequential holder_sequential() {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::Tanh(), torch::nn::Linear(3, 2));
}

// Rank r's batch; every rank can make both.
torch::Tensor holder_batch(int rank) {
  torch::manual_seed(100 + rank);
  return torch::randn({3, 4});
}

torch::Tensor holder_loss(const torch::Tensor& out) { return out.pow(2).mean(); }

// One backward through `model` (a wrapper); its .grad must be the average of both ranks' gradients,
// each computed here on the plain module with autograd::grad (which leaves .grad and DDP alone).
template <typename Wrapper>
bool holder_grads_averaged(Wrapper& model, int rank, const char* what) {
  std::vector<torch::Tensor> params = model->parameters();
  std::vector<torch::Tensor> expected(params.size());
  for (int r = 0; r < 2; ++r) {
    const std::vector<torch::Tensor> loss{holder_loss(model->forward(holder_batch(r)))};
    const auto grads = torch::autograd::grad(loss, params);
    for (size_t i = 0; i < params.size(); ++i) expected[i] = r == 0 ? grads[i] / 2 : expected[i] + grads[i] / 2;
  }
  holder_loss(model(holder_batch(rank))).backward();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined() || !torch::allclose(params[i].grad(), expected[i], 1e-6, 1e-7)) {
      std::fprintf(stderr, "rank %d: %s: parameter %zu's gradient is not the average over the ranks\n", rank, what, i);
      return false;
    }
  }
  return true;
}

// The same value on every rank (the store's all-gather of a text).
bool holder_same_on_every_rank(ddp::ProcessGroup& pg, double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  const auto all = pg.all_gather_strings(text.str());
  for (const auto& v : all)
    if (v != all.front()) return false;
  return true;
}

double holder_checksum(const std::vector<torch::Tensor>& params) {
  double sum = 0;
  for (const auto& p : params) sum += p.to(torch::kFloat64).sum().item<double>();
  return sum;
}

int train_through_every_holder(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  bool ok = true;
  // torch::nn::Sequential, named as the template argument; different weights on each rank (the
  // wrapper gives every rank rank 0's).
  {
    torch::manual_seed(rank);
    auto seq = holder_sequential();
    ddp::DistributedDataParallel<torch::nn::Sequential> model(seq, pg);
    ok = holder_grads_averaged(model, rank, "DistributedDataParallel<torch::nn::Sequential>") && ok;
  }
  {  // a TORCH_MODULE holder, the type deduced
    torch::manual_seed(rank);
    HolderNet net;
    ddp::DistributedDataParallel model(net, pg);
    static_assert(std::is_same_v<decltype(model), ddp::DistributedDataParallel<HolderNet>>);
    ok = holder_grads_averaged(model, rank, "DistributedDataParallel(HolderNet)") && ok;
  }
  {  // ...Impl + std::shared_ptr, as before
    torch::manual_seed(rank);
    ddp::DistributedDataParallel model(std::make_shared<HolderNetImpl>(), pg);
    ok = holder_grads_averaged(model, rank, "DistributedDataParallel(std::shared_ptr<HolderNetImpl>)") && ok;
  }
  {  // Join over a holder's wrapper: rank 1 has one batch fewer and shadows one backward
    torch::manual_seed(rank);
    ddp::DistributedDataParallel<torch::nn::Sequential> model(holder_sequential(), pg);
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    const int64_t shadowed = ddp::join(model, [&] {
      for (int step = 0; step < 2 - rank; ++step) {
        optimizer.zero_grad();
        holder_loss(model(holder_batch(rank))).backward();
        optimizer.step();
      }
    });
    if (shadowed != rank) {
      std::fprintf(stderr, "rank %d: join over a Sequential shadowed %lld backward passes, not %d\n", rank,
                   static_cast<long long>(shadowed), rank);
      ok = false;
    }
    if (!holder_same_on_every_rank(*pg, holder_checksum(model->parameters()))) {
      std::fprintf(stderr, "rank %d: after join, the ranks' weights differ\n", rank);
      ok = false;
    }
  }
  {  // ZeRO's wrapper over a holder: a step leaves the same new weights on every rank
    torch::manual_seed(rank);
    HolderNet net;
    ddp::ZeroDataParallel<HolderNet> zero(net, pg, {.stage = 2});
    ddp::ShardedAdamW optimizer(zero, {.lr = 0.1});
    const double before = holder_checksum(zero->parameters());
    holder_loss(zero(holder_batch(rank))).backward();
    optimizer.step();
    const double after = holder_checksum(zero->parameters());
    if (after == before || !holder_same_on_every_rank(*pg, after)) {
      std::fprintf(stderr, "rank %d: ZeroDataParallel<HolderNet> did not step to the same weights on every rank\n",
                   rank);
      ok = false;
    }
  }
  {  // convert_sync_batchnorm on a holder and on a shared_ptr
    auto seq = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
    auto shared = std::make_shared<torch::nn::SequentialImpl>(torch::nn::BatchNorm1d(3), torch::nn::BatchNorm1d(3));
    const size_t converted = ddp::convert_sync_batchnorm(seq, pg) + ddp::convert_sync_batchnorm(shared, pg);
    if (converted != 3) {
      std::fprintf(stderr, "rank %d: convert_sync_batchnorm converted %zu BatchNorm layers, not 3\n", rank, converted);
      ok = false;
    }
  }
  return ok ? 0 : 1;
}

}  // namespace

TEST(ModuleHolders, EveryWrapperTakesAHolderOrASharedPtrAndTrains) {
  EXPECT_EQ(ddp_test::run_ranks(2, train_through_every_holder), 0);
}
