// FullyShardedDataParallel (ddp/fully_sharded.h) against one process: N = 1, 2, 3, 4 ranks (separate
// processes, Gloo) train a small transformer-like float32 model (fsdp_scenarios.h: an input layer,
// three residual blocks of LayerNorm + two Linear layers of unequal widths, a final LayerNorm and
// head; 588 parameters, no unit's count (91, 143, 245, 109) divisible by 2, 3 or 4) on their shares
// of each global batch; one process trains the same model on the whole batch with the same AdamW
// (ddp::adam_step). After 2 steps the full state_dict gathered on rank 0 equals the reference within
// 1e-6 (float32; the gradients are summed in another order). Three variants in one process group
// per world size: reshard after forward with prefetch; the same with activation checkpointing (also
// equal to the run without it); parameters kept after forward, no prefetch, 2 micro-batches with
// no_sync(). Also: each rank's 1/N, resume from a sharded snapshot on another world size, ranks
// with different models refused at construction, the refusals and bf16 compute, ddp::call's
// pass-through, and Python's torch.load reading the gathered state_dict (PythonBridgeFsdp, label
// integration).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include "ddp/autocast.h"
#include "ddp/files.h"
#include "ddp/fully_sharded.h"
#include "ddp/grad_scaler.h"
#include "ddp/module_call.h"
#include "ddp/timeline.h"
#include "ddp/weights_io.h"
#include "fsdp_scenarios.h"
#include "host_allocations.h"
#include "multiprocess.h"

namespace fully_sharded_tests {

using namespace fsdp_scenarios;  // TinyNet, batch, reference, train_fsdp, ...: shared with the GPU suite

TEST(FullyShardedEquivalence, OneTwoThreeFourRanksEqualOneProcess) {
  const char* const phases[] = {"1 rank", "2 ranks", "3 ranks", "4 ranks"};
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE(phases[n - 1]);
    EXPECT_EQ(ddp_test::run_ranks(n, equals_one_process, std::chrono::seconds(60), phases[n - 1]), 0);
  }
}

// Each rank keeps 1/N of the parameters, gradients and Adam's moments (padded per unit). The step's
// collectives are on the timeline, as DDP's and ZeRO's buckets: one reduce-scatter per unit (4).
TEST(FullyShardedEquivalence, EachRankHoldsItsShare) {
  EXPECT_EQ(ddp_test::run_ranks(
                3,
                [](int, auto pg) {
                  auto net = make_net();
                  int64_t numel = 0;
                  for (const auto& p : net->parameters()) numel += p.numel();
                  ddp::FullyShardedDataParallel<TinyNetImpl> model(net, units_of(*net), pg);
                  ddp::FullyShardedAdamW optimizer(model, kAdam);
                  auto [x, y] = my_share(batch(0), pg->rank(), 3);
                  ddp::start_timeline({.rank = pg->rank(), .backward_nodes = false});
                  torch::nn::functional::cross_entropy(model(x), y).backward();
                  optimizer.step();
                  ddp::stop_timeline();
                  // A span is added when its collective's future completes, on the backend's thread.
                  auto count = [](const std::string& text, const std::string& part) {
                    int n = 0;
                    for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
                    return n;
                  };
                  const std::string gather = "parameter all-gather (unit blocks1)";
                  const std::string reduce = "gradient reduce-scatter (";
                  std::string events = ddp::timeline_events();
                  for (int i = 0; i < 200 && (count(events, gather) < 1 || count(events, reduce) < 4); ++i) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
                    events = ddp::timeline_events();
                  }
                  const bool recorded = count(events, gather) >= 1 && count(events, reduce) == 4;
                  if (!recorded)
                    std::fprintf(stderr, "rank %d: the timeline has %d '%s' and %d reduce-scatters (want 4)\n",
                                 pg->rank(), count(events, gather), gather.c_str(), count(events, reduce));
                  int64_t shard = 0, padded = 0;
                  for (const auto& u : model.engine()->units()) {
                    shard += u.shard_numel;
                    padded += u.padded_numel;
                  }
                  const int64_t expected = (shard * 4) * 4;  // param + grad + 2 moments, float32
                  const int64_t held = model.engine()->shard_bytes() + optimizer.state_bytes();
                  std::printf("rank %d: %lld bytes held of the full %lld (numel %lld, padded %lld)\n", pg->rank(),
                              static_cast<long long>(held), static_cast<long long>(numel * 16),
                              static_cast<long long>(numel), static_cast<long long>(padded));
                  const bool ok = held == expected && padded - numel < 3 * 4 && shard * 3 == padded &&
                                  model.engine()->gathered_bytes() == 0 && recorded;
                  return ok ? 0 : 1;
                }),
            0);
}

// A model of 6 units of ~1 MiB and a root unit, built on the host, wrapped by 2 ranks: no rank ever
// holds the whole model beside its shards. The host allocations are counted exactly (host_allocations.h):
// wrapping takes at most about one unit over what the model had (the model's own memory goes unit by
// unit: afterwards a rank holds its shards, not the model); a step's reduce-scatter inputs are freed
// as each lands (at most 2 units hold one); full_state_dict() takes at most three units on rank 1 (the
// gathered unit, Gloo's buffer for it, and that buffer of the unit before, which Gloo's thread may
// free a moment after the wait: measured 2 or 3), rank 0 also the dict; load_full_state_dict() reads
// rank 0's dict only. (Before, a whole copy of the model, 6 units and more, in both phases.)
struct WideNetImpl : torch::nn::Module {
  WideNetImpl() {
    for (int i = 0; i < 6; ++i)
      blocks.push_back(register_module("blocks" + std::to_string(i), torch::nn::Linear(512, 512)));
    head = register_module("head", torch::nn::Linear(512, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : blocks) x = torch::tanh(ddp::call(b, x));
    return head(x);
  }
  std::vector<torch::nn::Linear> blocks;
  torch::nn::Linear head{nullptr};
};

TEST(FullyShardedEquivalence, NoRankEverHoldsTheWholeModel) {
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [](int rank, auto pg) {
                  auto& host = ddp_test::HostAllocations::install();
                  torch::manual_seed(3);
                  auto net = std::make_shared<WideNetImpl>();
                  std::vector<std::shared_ptr<torch::nn::Module>> units;
                  for (auto& b : net->blocks) units.push_back(b.ptr());
                  int64_t model_bytes = 0;
                  for (const auto& p : net->parameters()) model_bytes += static_cast<int64_t>(p.nbytes());
                  ddp::TensorDict built;  // rank 0 keeps the weights as built, to load them back below
                  if (rank == 0)
                    for (const auto& [name, t] : ddp::state_dict(*net)) built.emplace_back(name, t.detach().clone());
                  const int64_t unit = 513 * 512 * 4, mib = 1 << 20;
                  auto report = [&](const char* what, int64_t extra, int64_t bound) {
                    std::printf("rank %d: %-26s %6.2f MiB over what it held before (bound %.2f MiB)\n", rank, what,
                                static_cast<double>(extra) / mib, static_cast<double>(bound) / mib);
                    return extra <= bound;
                  };
                  bool ok = true;
                  host.reset_peak();
                  const int64_t before = host.current();
                  ddp::FullyShardedDataParallel model(net, units, pg);
                  ok &= report("wrapping (peak)", host.peak() - before, unit + unit / 2 + 64 * 1024);
                  // Gloo's worker thread drops its reference to the last broadcast's tensor (a view of the
                  // staging buffer, one unit) a moment after the wait returns: measured once it has.
                  const int64_t after_bound = -(model_bytes / 2) + 64 * 1024;
                  for (int i = 0; i < 200 && host.current() - before > after_bound; ++i)
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
                  ok &= report("after wrapping", host.current() - before, after_bound);

                  ddp::ShardedAdamW optimizer(model, kAdam);
                  auto x = torch::randn({6, 512}), y = torch::randint(0, 4, {6});
                  torch::nn::functional::cross_entropy(model(x), y).backward();
                  optimizer.step();
                  std::printf("rank %d: at most %d units held a reduce-scatter input\n", rank,
                              model.engine()->most_units_holding_reduce_input());
                  ok &= model.engine()->most_units_holding_reduce_input() <= 2;

                  host.reset_peak();
                  const int64_t steady = host.current();
                  auto full = model.full_state_dict();
                  ok &= rank == 0
                            ? report("full_state_dict (peak)", host.peak() - steady, model_bytes + 3 * unit + 64 * 1024)
                            : report("full_state_dict (peak)", host.peak() - steady, 3 * unit + 64 * 1024) &&
                                  full.empty();
                  // Back to the weights as built, from rank 0's dict alone.
                  model.load_full_state_dict(rank == 0 ? built : ddp::TensorDict{});
                  const auto again = model.full_state_dict();
                  if (rank == 0) {
                    const double diff = max_difference(again, built);
                    std::printf("rank 0: loaded from rank 0's dict: max difference %.3g\n", diff);
                    ok &= diff == 0;
                  }
                  return ok ? 0 : 1;
                }),
            0);
}

// float16 training's loss scaling with FSDP: a GradScaler attached to the (ZeRO's) ShardedAdamW. An
// inf in one element of one rank's gradient lands, after the reduce-scatter, in one rank's slice
// only; the ranks' found_inf is combined, so every rank skips the step and the scale backs off; the
// next step applies.
TEST(FullyShardedEquivalence, Fp16InfInOneRanksSliceSkipsTheStepOnEveryRank) {
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [](int rank, auto pg) {
                  auto net = make_net();
                  ddp::FullyShardedDataParallel model(net, units_of(*net), pg);
                  ddp::ShardedAdamW optimizer(model, kAdam);
                  auto scaler = std::make_shared<ddp::GradScaler>(torch::kCPU);
                  optimizer.set_grad_scaler(scaler);
                  bool ok = true;
                  for (int step = 0; step < 2; ++step) {
                    optimizer.zero_grad();
                    auto [x, y] = my_share(batch(step), rank, 2);
                    auto loss = torch::nn::functional::cross_entropy(model(x), y);
                    if (step == 0 && rank == 1)  // the head is in the root unit, gathered until backward ends
                      loss = loss + net->head->weight.index({0, 0}) * std::numeric_limits<float>::infinity();
                    scaler->scale(loss).backward();
                    bool mine = false;
                    for (const auto& g : optimizer.state().gradient_shards()) mine |= !g.isfinite().all().item<bool>();
                    std::vector<torch::Tensor> before;
                    for (const auto& p : optimizer.state().parameter_shards()) before.push_back(p.clone());
                    const double scale = scaler->get_scale();
                    optimizer.step();
                    bool unchanged = true;
                    const auto after = optimizer.state().parameter_shards();
                    for (size_t k = 0; k < after.size(); ++k) unchanged &= torch::equal(before[k], after[k]);
                    std::printf("rank %d, step %d: inf in this rank's slice: %s; step %s; scale %g -> %g\n", rank, step,
                                mine ? "yes" : "no", unchanged ? "skipped" : "applied", scale, scaler->get_scale());
                    ok &= step == 0 ? unchanged && scaler->get_scale() < scale : !unchanged;
                  }
                  return ok ? 0 : 1;
                }),
            0);
}

// Snapshot with 2 ranks after 2 steps, resume with 3 ranks for a third: equals 3 steps in one process.
TEST(FullyShardedEquivalence, ResumesOnAnotherWorldSize) {
  const std::string dir = ddp_test::shared_test_dir();
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/fsdp.json";
  auto run = [&](int n, int from, int to, const std::string& phase) {
    return ddp_test::run_ranks(
        n,
        [&, from, to](int rank, auto pg) {
          auto net = make_net();
          ddp::FullyShardedDataParallel<TinyNetImpl> model(net, units_of(*net), pg);
          ddp::FullyShardedAdamW optimizer(model, kAdam);
          if (from > 0) {
            const auto state = ddp::load_fully_sharded_snapshot(path, optimizer);
            if (!state || state->epochs_run != 1 || optimizer.steps_taken() != from) return 1;
          }
          for (int s = from; s < to; ++s) {
            optimizer.zero_grad();
            auto [x, y] = my_share(batch(s), rank, n);
            torch::nn::functional::cross_entropy(model(x), y).backward();
            optimizer.step();
          }
          if (from == 0) {
            ddp::save_fully_sharded_snapshot(path, optimizer, {.epochs_run = 1, .world_size = n});
            return 0;
          }
          const auto full = model.full_state_dict();
          if (rank != 0) return 0;
          const double diff = max_difference(full, reference(to, 1));
          std::printf("resumed on %d ranks: max |fsdp - one process| = %.3g\n", n, diff);
          return diff <= kTolerance ? 0 : 1;
        },
        std::chrono::seconds(60), phase);
  };
  EXPECT_EQ(run(2, 0, 2, "save"), 0);
  EXPECT_EQ(run(3, 2, 3, "resume"), 0);
  ddp::remove_tree(dir);
}

bool fails_with(const std::function<void()>& f, const std::string& expected) {
  try {
    f();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(expected) != std::string::npos) return true;
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
    return false;
  }
  std::fprintf(stderr, "no error, expected one with \"%s\"\n", expected.c_str());
  return false;
}

struct TiedImpl : torch::nn::Module {  // two blocks sharing one Linear
  TiedImpl() {
    a = register_module("a", Block(4, 3));
    b = register_module("b", Block(4, 3));
    b->fc1 = b->replace_module("fc1", a->fc1);
  }
  torch::Tensor forward(torch::Tensor x) { return ddp::call(b, ddp::call(a, x)); }
  Block a{nullptr}, b{nullptr};
};

struct PlainCallImpl : torch::nn::Module {  // the second unit called without ddp::call
  PlainCallImpl() {
    a = register_module("a", Block(4, 3));
    b = register_module("b", Block(4, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return b->forward(ddp::call(a, x)); }
  Block a{nullptr}, b{nullptr};
};

// The refusals, each naming the fix; then the same model still trains, and in bfloat16.
// Ranks that built different models stop at construction with the engine core's model check
// (names and shapes against rank 0's, as DDP's), not in a broadcast of mismatched sizes.
TEST(FullyShardedEquivalence, DifferentModelsOnRanksAreAnError) {
  EXPECT_EQ(
      ddp_test::run_ranks(
          2,
          [](int rank, auto pg) {
            auto block = Block(8, rank == 0 ? 7 : 6);  // rank 1's hidden layer is narrower
            const bool refused = fails_with([&] { ddp::FullyShardedDataParallel<BlockImpl> m(block.ptr(), {}, pg); },
                                            "the ranks hold different models");
            if (!refused) return 1;
            // The same model, but rank 1 names one unit less: named before any collective.
            auto net = make_net();
            auto units = units_of(*net);
            if (rank == 1) units.pop_back();
            return fails_with([&] { ddp::FullyShardedDataParallel m(net, units, pg); },
                              "rank 1 has 'units blocks0, blocks1' where rank 0 has 'units blocks0, blocks1, blocks2'")
                       ? 0
                       : 1;
          }),
      0);
}

TEST(FullyShardedEquivalence, RefusalsAndBf16) {
  EXPECT_EQ(
      ddp_test::run_ranks(
          1,
          [](int, auto pg) {
            bool ok = true;
            auto tied = std::make_shared<TiedImpl>();
            ok &= fails_with(
                [&] {
                  ddp::FullyShardedDataParallel<TiedImpl> m(tied, {tied->a.ptr(), tied->b.ptr()}, pg);
                },
                "is in two units");
            auto net = make_net();
            auto stranger = Block(8, 2);
            ok &= fails_with([&] { ddp::FullyShardedDataParallel<TinyNetImpl> m(net, {stranger.ptr()}, pg); },
                             "is not a submodule");
            ok &= fails_with(
                [&] {
                  ddp::FullyShardedDataParallel<TinyNetImpl> m(net, {net->blocks[0].ptr(), net->blocks[0]->fc1.ptr()},
                                                               pg);
                },
                "lies inside the unit");
            ddp::FullyShardedDataParallel<TinyNetImpl> model(net, units_of(*net), pg);
            ok &= fails_with(
                [&] {
                  ddp::call(net->blocks[1], torch::randn({2, 8}));
                },
                "outside the wrapped model's forward");
            ok &= fails_with([&] { ddp::FullyShardedDataParallel<TinyNetImpl> again(net, units_of(*net), pg); },
                             "already has an interceptor");
            // A unit called as block->forward(x) reads ungathered parameters: named, with the fix.
            {
              auto plain = std::make_shared<PlainCallImpl>();
              ddp::FullyShardedDataParallel<PlainCallImpl> m(plain, {plain->a.ptr(), plain->b.ptr()}, pg);
              ok &= fails_with([&] { m(torch::randn({2, 4})); }, "not called through ddp::call in this forward: b");
            }
            // Still trains after the refusals.
            auto out = model(torch::randn({2, 5}));
            out.sum().backward();
            ok &= model.engine()->gathered_bytes() == 0;
            // Computing in bfloat16, reducing in float32: near the float32 run, shards float32.
            ddp::FullyShardedOptions o;
            o.param_dtype = torch::kBFloat16;
            o.reduce_dtype = torch::kFloat32;
            const auto bf16 = train_fsdp(pg, Variant{"bf16"}, 2, o);
            const double diff = max_difference(bf16, reference(2, 1));
            std::printf("bf16 compute vs float32: max difference %.3g (bound 3e-2)\n", diff);
            ok &= diff <= 3e-2 && diff > 0 && bf16.front().second.scalar_type() == torch::kFloat32;
            // no_sync sums the bfloat16 gradients in the reduce dtype (float32: 4 bytes an element).
            {
              auto n2 = make_net();
              ddp::FullyShardedDataParallel<TinyNetImpl> m2(n2, units_of(*n2), pg, o);
              auto ns = m2.no_sync();
              torch::nn::functional::cross_entropy(m2(batch(0).first), batch(0).second).backward();
              int64_t padded = 0;
              for (const auto& u : m2.engine()->units()) padded += u.padded_numel;
              std::printf("no_sync in bf16: %lld bytes of summed gradients for %lld elements\n",
                          static_cast<long long>(m2.engine()->full_gradient_bytes()), static_cast<long long>(padded));
              ok &= m2.engine()->full_gradient_bytes() == padded * 4;
            }
            // Checkpointing under autocast: the recompute runs under the forward's autocast, so the
            // gradients (and the trained weights) equal the run without checkpointing.
            // (Backward outside autocast, as PyTorch recommends: there the state is off.)
            ddp::TensorDict amp[2];
            for (int checkpoint = 0; checkpoint < 2; ++checkpoint) {
              auto n3 = make_net();
              ddp::FullyShardedOptions co;
              co.checkpoint_activations = checkpoint == 1;
              ddp::FullyShardedDataParallel<TinyNetImpl> m3(n3, units_of(*n3), pg, co);
              ddp::ShardedAdamW adam(m3, kAdam);
              for (int step = 0; step < 2; ++step) {
                adam.zero_grad();
                auto [x, y] = batch(step);
                torch::Tensor loss;
                {
                  ddp::Autocast autocast({.device_type = torch::kCPU, .dtype = torch::kBFloat16});
                  loss = torch::nn::functional::cross_entropy(m3(x), y);
                }
                loss.backward();
                adam.step();
              }
              amp[checkpoint] = m3.full_state_dict();
            }
            const double amp_diff = max_difference(amp[0], amp[1]);
            std::printf("autocast bf16, checkpointing vs without: max difference %.3g\n", amp_diff);
            ok &= amp_diff <= 1e-6;
            return ok ? 0 : 1;
          }),
      0);
}

// ddp::call without an interceptor is the module's forward (holder, shared_ptr, the module itself).
TEST(ModuleCall, PassesThroughWithoutAnInterceptor) {
  torch::manual_seed(0);
  Block block(4, 3);
  auto x = torch::randn({2, 4});
  const auto expected = block->forward(x);
  EXPECT_TRUE(torch::equal(ddp::call(block, x), expected));
  EXPECT_TRUE(torch::equal(ddp::call(block.ptr(), x), expected));
  EXPECT_TRUE(torch::equal(ddp::call(*block, x), expected));
  // With one: it sees the tensor arguments and can rerun the forward with others.
  int calls = 0;
  {
    ddp::CallInterception hook(
        *block, [&](torch::nn::Module&, const std::vector<torch::Tensor>& args, const ddp::ModuleForward& forward) {
          ++calls;
          return forward({args[0] * 2});
        });
    EXPECT_TRUE(torch::equal(ddp::call(block, x), block->forward(x * 2)));
  }
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(torch::equal(ddp::call(block, x), expected));  // unregistered with the hook's end
}

#ifdef DDPW_TEST_PYTHON
const char* const kPython = DDPW_TEST_PYTHON;
#else
const char* const kPython = "";
#endif

// The full state_dict gathered on rank 0 of 3 is a file Python's torch.load (weights_only) reads,
// equal to the one-process model's state_dict.
TEST(PythonBridgeFsdp, PythonLoadsTheGatheredStateDict) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch was found by the configure";
  const std::string dir = ddp_test::shared_test_dir();
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(ddp_test::run_ranks(3,
                                [&](int rank, auto pg) {
                                  const auto full = train_fsdp(pg, Variant{"plain"}, 2);
                                  if (rank == 0) {
                                    std::ofstream(dir + "/fsdp.pt", std::ios::binary)
                                        << ddp::tensor_dict_to_bytes(full);
                                    std::ofstream(dir + "/one.pt", std::ios::binary)
                                        << ddp::tensor_dict_to_bytes(reference(2, 1));
                                  }
                                  return 0;
                                }),
            0);
  const std::string script =
      "import sys, torch\n"
      "a = torch.load(sys.argv[1], weights_only=True); b = torch.load(sys.argv[2], weights_only=True)\n"
      "assert list(a) == list(b), (list(a), list(b))\n"
      "assert 'blocks1.fc1.weight' in a and a['blocks1.fc1.weight'].shape == (13, 8)\n"
      "worst = max((a[k] - b[k]).abs().max().item() for k in a)\n"
      "print(len(a), 'tensors, max difference', worst); sys.exit(0 if worst <= 2e-5 else 1)\n";
  std::ofstream(dir + "/check.py") << script;
  const std::string command =
      "timeout 120 '" + std::string(kPython) + "' " + dir + "/check.py " + dir + "/fsdp.pt " + dir + "/one.pt";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ddp::remove_tree(dir);
}

}  // namespace fully_sharded_tests
