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

// set_requires_gradient_sync (no_sync.h), FSDP2's name for what no_sync() does, on DDP and ZeRO:
// while it is false a backward leaves each rank's own gradient in .grad (the ranks' differ: nothing
// was reduced); set back to true, the next backward averages what accumulated (own + own: the
// ranks' sum). A NoSync inside restores false, not true.
namespace {

// Each rank's own gradient of holder_loss on `batch`, through the plain module (autograd::grad
// leaves .grad and the wrapper alone).
std::vector<torch::Tensor> own_gradients(torch::nn::Module& module, const torch::Tensor& out) {
  const std::vector<torch::Tensor> loss{holder_loss(out)};
  return torch::autograd::grad(loss, module.parameters());
}

template <typename Wrapper>
bool pauses_and_resumes(Wrapper& model, ddp::ProcessGroup& pg, int rank, const char* what) {
  bool ok = true;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, why.c_str());
    ok = false;
  };
  const auto params = model->parameters();
  std::vector<torch::Tensor> sum;  // g_0 + g_1, each rank's own gradient on its own batch
  std::vector<torch::Tensor> own;
  for (int r = 0; r < 2; ++r) {
    const auto g = own_gradients(*model.module(), model->forward(holder_batch(r)));
    for (size_t i = 0; i < g.size(); ++i) {
      if (r == 0)
        sum.push_back(g[i].clone());
      else
        sum[i] += g[i];
    }
    if (r == rank) own = g;
  }
  model.set_requires_gradient_sync(false);
  {
    auto quiet = model.no_sync();  // nested: restores false
  }
  if (model.requires_gradient_sync()) fail("a NoSync inside set_requires_gradient_sync(false) turned sync back on");
  holder_loss(model(holder_batch(rank))).backward();
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].grad().defined() || !torch::allclose(params[i].grad(), own[i], 1e-6, 1e-7))
      fail("with sync off, parameter " + std::to_string(i) + "'s .grad is not this rank's own gradient");
  if (holder_same_on_every_rank(pg, holder_checksum({params[0].grad()})))
    fail("with sync off, the ranks' gradients are equal: they were reduced");
  model.set_requires_gradient_sync(true);
  if (!model.requires_gradient_sync()) fail("set_requires_gradient_sync(true) did not turn sync on");
  holder_loss(model(holder_batch(rank))).backward();
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].grad().defined() || !torch::allclose(params[i].grad(), sum[i], 1e-5, 1e-6))
      fail("after sync is on again, parameter " + std::to_string(i) +
           "'s .grad is not the average of both passes over the ranks");
  return ok;
}

}  // namespace

TEST(ModuleHolders, DdpSetRequiresGradientSyncPausesTheAllreduce) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
                                  torch::manual_seed(rank);
                                  ddp::DistributedDataParallel<HolderNet> model(HolderNet(), pg);
                                  return pauses_and_resumes(model, *pg, rank, "DistributedDataParallel") ? 0 : 1;
                                }),
            0);
}

// Stage 1: after a synced backward .grad views the averaged buckets, so the values compare as DDP's.
TEST(ModuleHolders, ZeroSetRequiresGradientSyncPausesTheReduction) {
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
                                  torch::manual_seed(rank);
                                  ddp::ZeroDataParallel<HolderNet> model(HolderNet(), pg, {.stage = 1});
                                  return pauses_and_resumes(model, *pg, rank, "ZeroDataParallel (stage 1)") ? 0 : 1;
                                }),
            0);
}
