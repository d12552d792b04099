// On a machine with an NVIDIA GPU: ZeRO (step 4) and the trainer (step 5) on CUDA tensors, each test a
// claim that a wrong implementation would fail. Everything runs on ONE GPU (two ranks share it over
// Gloo, which copies CUDA tensors through the host; NCCL only with one rank). Without a GPU every test
// is SKIPPED with the reason, never passed.
//   * ZeRO-1 and ZeRO-2, two ranks over Gloo: equal DDP + LibTorch's AdamW within 1e-9 (float64), Adam's
//     moments slice by slice (the CPU scenarios, zero_scenarios.h, on the device), also with clipping
//     by the global norm, no_sync accumulation, gradients zeroed in place, and synced accumulation;
//   * one NCCL rank, ZeRO-2 with clipping: equals LibTorch's AdamW on the whole model, its collectives
//     on NCCL (kept at world size 1);
//   * two and four NCCL ranks (a GPU each; skipped with fewer): ZeRO-1 and ZeRO-2 equal DDP, as above;
//   * a ZeRO step on one NCCL rank never makes the host wait for the GPU; clipping waits exactly once
//     (the global norm's read);
//   * a sharded snapshot written by two ranks on the GPU resumes bit for bit (weights, moments, step
//     count, buffers, CPU and CUDA random generators), and a plain module on the CPU loads its weights;
//   * the trainer (ddpw::Trainer) on the GPU, as the learner runs it (CNN with dropout, --deterministic):
//     single and ddp (one NCCL rank) end with step 0's checksum; zero1 and zero2 (one NCCL rank) with
//     step 4's, the loss falling; zero2 with two ranks over Gloo on one GPU (the lines torchrun starts)
//     with step 4's under the same launch, on both ranks, one shard each.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "course/sync_counter.h"
#include "ddp/device.h"
#include "ddp/files.h"
#include "ddp/process_group.h"
#include "ddp/sharded_adamw.h"
#include "ddp/sharded_snapshot.h"
#include "ddp/zero_data_parallel.h"
#include "gpu_test_support.h"
#include "multiprocess.h"
#include "zero_scenarios.h"

using namespace gpu_test;  // REQUIRE_GPUS, TempDir, run_shell, checksums_in, ...: shared with test_gpu.cpp

namespace {

ddp_test::RankSetup two_ranks_on_one_gpu_over_gloo() {
  ddp_test::RankSetup setup;
  setup.n = 2;
  setup.device = "cuda:0";
  setup.backend = "gloo";
  return setup;
}

int zero_on_one_gpu(zero_scenarios::Variant v) {
  return ddp_test::run_ranks(two_ranks_on_one_gpu_over_gloo(),
                             [v](int rank, auto pg) { return zero_scenarios::zero_equals_ddp(rank, pg, v); });
}

}  // namespace

// ---- ZeRO equals DDP on CUDA tensors (two ranks, one GPU, Gloo) ------------------------------

// Gloo moves the buckets through the host on its own streams (alltoall for the reduce-scatter,
// allgather for the parameters): the best race detector one GPU offers for the flat buckets, the
// .grad views into them (ZeRO-1) and the gradient slices (ZeRO-2).
TEST(GpuZero, Zero1TwoRanksOnOneGpuOverGlooEqualsDdp) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(zero_on_one_gpu({1, 1, 0}), 0);
}

TEST(GpuZero, Zero2TwoRanksOnOneGpuOverGlooEqualsDdp) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(zero_on_one_gpu({2, 1, 0}), 0);
}

// Clipping by the global norm (an allreduce of the squares, read on the host), two micro-batches
// under no_sync(), gradients zeroed in place (under ZeRO-1 .grad lives in the buckets).
TEST(GpuZero, Zero1NoSyncClippedZeroedInPlaceOnOneGpuOverGlooEqualsDdp) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(zero_on_one_gpu({1, 3, zero_scenarios::kClip, false}), 0);
}

TEST(GpuZero, Zero2NoSyncClippedOnOneGpuOverGlooEqualsDdp) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(zero_on_one_gpu({2, 3, zero_scenarios::kClip}), 0);
}

// DeepSpeed's accumulation: every micro-batch reduce-scatters, ZeRO-2 adds into its gradient slice.
TEST(GpuZero, Zero2SyncedAccumulationOnOneGpuOverGlooEqualsDdp) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(zero_on_one_gpu({2, 2, zero_scenarios::kClip, true, false}), 0);
}

// ---- one NCCL rank ------------------------------------------------------------------------------

// The reduce-scatters, the all-gathers and the clipping norm's allreduce run on NCCL (kept at world
// size 1: ProcessGroupOptions::collectives_at_world_size_1).
TEST(GpuZero, OneNcclRankZero2ClippedEqualsLibTorchAdamW) {
  REQUIRE_GPUS(1);
  ddp_test::RankSetup setup;
  setup.n = 1;
  setup.device = "cuda";
  setup.backend = "nccl";
  setup.collectives_at_world_size_1 = true;
  EXPECT_EQ(ddp_test::run_ranks(
                setup,
                [](int, auto pg) { return zero_scenarios::one_rank_equals_libtorch_adamw(pg, zero_scenarios::kClip); }),
            0);
}

// A ZeRO training step (zero_grad, forward, backward with the buckets' hooks and end-of-backward
// callback, the sharded AdamW step) queues work and returns: no host synchronization. Clipping reads
// the global norm on the host, once per step (DeepSpeed's clipping reads it too). Counted after two
// warm-up steps, with the batches already on the GPU.
TEST(GpuZero, ZeroStepDoesNotSynchronizeAndClippingOnce) {
  REQUIRE_GPUS(1);
  if (!ddpw::SyncCounter::available()) GTEST_SKIP() << "LibTorch built without CUDA";
  TempDir dir;
  const auto device = ddp::choose_device("cuda", 0);
  auto pg = nccl_group_of_one(dir, device);
  constexpr int kWarmUp = 2, kCounted = 6;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int step = 0; step < kWarmUp + kCounted; ++step) batches.push_back(zero_scenarios::batch(step, device));
  for (const int stage : {1, 2}) {
    for (const double clip : {0.0, zero_scenarios::kClip}) {
      auto net = zero_scenarios::make_mlp(4, false, device);
      ddp::ZeroDataParallel<zero_scenarios::MlpImpl> model(net, pg, {stage, 0.02, true});
      ddp::ShardedAdamW optimizer(model, zero_scenarios::kAdam);
      ddpw::SyncCounter syncs;
      for (int step = 0; step < kWarmUp + kCounted; ++step) {
        if (step == kWarmUp) syncs.start();
        optimizer.zero_grad();
        torch::mse_loss(model->forward(batches[step].first), batches[step].second).backward();
        if (clip > 0) optimizer.clip_grad_norm(clip);
        optimizer.step();
      }
      syncs.stop();
      EXPECT_EQ(syncs.count(), clip > 0 ? kCounted : 0) << "ZeRO-" << stage << ", clip " << clip;
      EXPECT_TRUE(std::isfinite(net->l1->weight.sum().item<double>()));
    }
  }
  pg.reset();
}

// ---- NCCL ranks, one GPU each -----------------------------------------------------------------

namespace {

int zero_on_nccl(int ranks, zero_scenarios::Variant v) {
  ddp_test::RankSetup setup;
  setup.n = ranks;
  setup.device = "cuda";  // the local rank's GPU
  setup.backend = "nccl";
  return ddp_test::run_ranks(setup, [v](int rank, auto pg) { return zero_scenarios::zero_equals_ddp(rank, pg, v); });
}

}  // namespace

// The CPU scenarios over NCCL: the reduce-scatter straight into the gradient slice (ZeRO-2), the
// in-place all-gather of the parameters, the clipping norm's allreduce, each on NCCL's stream.
TEST(GpuZero, Zero1TwoNcclRanksEqualsDdp) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(zero_on_nccl(2, {1, 1, 0}), 0);
}

TEST(GpuZero, Zero2TwoNcclRanksNoSyncClippedEqualsDdp) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(zero_on_nccl(2, {2, 3, zero_scenarios::kClip}), 0);
}

TEST(GpuZero, Zero2TwoNcclRanksSyncedAccumulationEqualsDdp) {
  REQUIRE_GPUS(2);
  EXPECT_EQ(zero_on_nccl(2, {2, 2, zero_scenarios::kClip, true, false}), 0);
}

TEST(GpuZero, Zero2FourNcclRanksEqualsDdp) {
  REQUIRE_GPUS(4);
  EXPECT_EQ(zero_on_nccl(4, {2, 1, 0}), 0);
}

// ---- sharded snapshots on the GPU ------------------------------------------------------------------

namespace {

// A float64 net with buffers (BatchNorm in eval mode: its statistics stay as set, the same on both ranks).
struct NormNetImpl : torch::nn::Module {
  NormNetImpl() {
    l1 = register_module("l1", torch::nn::Linear(16, 64));
    norm = register_module("norm", torch::nn::BatchNorm1d(64));
    l2 = register_module("l2", torch::nn::Linear(64, 64));
    l3 = register_module("l3", torch::nn::Linear(64, 4));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return l3(torch::tanh(l2(torch::tanh(norm(l1(x)))))); }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};

// Made on the CPU from the seed, with running statistics of its own, then moved to the device.
std::shared_ptr<NormNetImpl> make_norm_net(uint64_t seed, const torch::Device& device) {
  torch::manual_seed(seed);
  auto net = std::make_shared<NormNetImpl>();
  {
    torch::NoGradGuard no_grad;
    net->norm->running_mean.copy_(torch::randn({64}, torch::kFloat64));
    net->norm->running_var.copy_(torch::rand({64}, torch::kFloat64) + 0.5);
  }
  net->eval();
  net->to(device);
  return net;
}

void train(ddp::ZeroDataParallel<NormNetImpl>& model, ddp::ShardedAdamW& optimizer, int first, int last, int rank,
           int world, const torch::Device& device) {
  for (int step = first; step < last; ++step) {
    auto [x, y] = zero_scenarios::batch(step, device);
    optimizer.zero_grad();
    torch::mse_loss(model->forward(zero_scenarios::shard(x, rank, world)), zero_scenarios::shard(y, rank, world))
        .backward();
    optimizer.clip_grad_norm(1.0);
    optimizer.step();
  }
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

std::vector<torch::Tensor> cpu_copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> copies;
  for (const auto& t : tensors) copies.push_back(t.detach().cpu().clone());
  return copies;
}

}  // namespace

// Two ranks on one GPU (Gloo) save mid-run, train on, and a second model from other weights resumes
// from the snapshot: it ends bit for bit where the uninterrupted one did. The shards went through the
// CPU (pickled) and came back onto the GPU; the CUDA generator's state came back too.
TEST(GpuZero, ShardedSnapshotOnOneGpuResumesBitForBit) {
  REQUIRE_GPUS(1);
  const std::string dir = ddp_test::shared_test_dir();  // the ranks are other processes: they inherit its path
  EXPECT_EQ(
      ddp_test::run_ranks(
          two_ranks_on_one_gpu_over_gloo(),
          [&](int rank, auto pg) {
            const torch::Device device = pg->device();
            const std::string path = dir + "/snap.json";
            constexpr int kBefore = 6, kAfter = 6;
            auto net = make_norm_net(100, device);
            ddp::ZeroDataParallel<NormNetImpl> model(net, pg, {2, 0.02, true});
            ddp::ShardedAdamW optimizer(model, zero_scenarios::kAdam);
            train(model, optimizer, 0, kBefore, rank, 2, device);
            torch::manual_seed(1234 + rank);  // the CPU and CUDA generators: their states go into the shard
            ddp::save_sharded_snapshot(path, optimizer, {1, 3, 2});
            const auto saved_weights = cpu_copies(net->parameters());
            const auto cpu_draw = torch::rand({3}), cuda_draw = torch::rand({3}, torch::TensorOptions().device(device));
            train(model, optimizer, kBefore, kBefore + kAfter, rank, 2, device);

            auto net2 = make_norm_net(555, device);  // other weights and statistics: all must come from the snapshot
            ddp::ZeroDataParallel<NormNetImpl> model2(net2, pg, {2, 0.02, true});
            ddp::ShardedAdamW optimizer2(model2, zero_scenarios::kAdam);
            torch::manual_seed(99);
            const auto state = ddp::load_sharded_snapshot(path, optimizer2);
            if (!state || state->epochs_run != 1 || state->step_in_epoch != 3 || state->world_size != 2) {
              std::fprintf(stderr, "rank %d: training state not restored\n", rank);
              return 1;
            }
            const bool rng_ok = torch::equal(torch::rand({3}), cpu_draw) &&
                                torch::equal(torch::rand({3}, torch::TensorOptions().device(device)), cuda_draw);
            const bool steps_ok = optimizer2.steps_taken() == kBefore;
            const bool on_device = net2->l1->weight.device() == device && net2->norm->running_mean.device() == device &&
                                   optimizer2.exp_avg_shards()[0].device() == device;
            const bool buffers_ok = torch::equal(net->norm->running_mean, net2->norm->running_mean) &&
                                    torch::equal(net->norm->running_var, net2->norm->running_var);
            // Rank 0 reads every shard of the GPU-written snapshot into a plain model on the CPU.
            bool plain_ok = true;
            if (rank == 0) {
              auto plain = make_norm_net(777, torch::kCPU);
              ddp::load_sharded_model_weights(path, *plain);
              plain_ok = all_equal(plain->parameters(), saved_weights) &&
                         torch::equal(plain->norm->running_mean, net->norm->running_mean.cpu());
            }
            train(model2, optimizer2, kBefore, kBefore + kAfter, rank, 2, device);
            const bool weights_equal = all_equal(net->parameters(), net2->parameters());
            const bool moments_equal = all_equal(optimizer.exp_avg_shards(), optimizer2.exp_avg_shards()) &&
                                       all_equal(optimizer.exp_avg_sq_shards(), optimizer2.exp_avg_sq_shards());
            const bool moved = !all_equal(cpu_copies(net->parameters()), saved_weights);
            std::printf(
                "rank %d on %s: resumed == uninterrupted: weights %s, moments %s; RNG (CPU, CUDA) %s, steps %s, "
                "buffers %s, tensors %s %s; the plain CPU model %s\n",
                rank, device.str().c_str(), weights_equal ? "equal" : "DIFFER", moments_equal ? "equal" : "DIFFER",
                rng_ok ? "restored" : "NOT restored", steps_ok ? "restored" : "NOT restored",
                buffers_ok ? "restored" : "NOT restored", on_device ? "on" : "NOT on", device.str().c_str(),
                plain_ok ? "loaded the saved weights" : "did NOT load the saved weights");
            return weights_equal && moments_equal && rng_ok && steps_ok && buffers_ok && on_device && plain_ok && moved
                       ? 0
                       : 1;
          }),
      0);
  EXPECT_TRUE(ddp::path_exists(dir + "/snap.json.g1.rank0-of-2") && ddp::path_exists(dir + "/snap.json.g1.rank1-of-2"))
      << "each rank writes its own shard";
  ddp::remove_tree(dir);
}

// ---- the trainer (step 5) and step 4 on the GPU, as the learner runs them ----------------------------

namespace {

// 28x28 images whose label is written into them (a bright bar in a row that depends on it, over
// noise): the CNN learns them within an epoch, so a falling loss shows training works.
void write_learnable_idx_pair(const std::string& dir, const std::string& split, uint32_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> labels(count);
  std::ofstream images(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
  for (uint32_t v : {2051u, count, 28u, 28u}) put_u32(images, v);
  for (uint32_t i = 0; i < count; ++i) {
    labels[i] = static_cast<uint8_t>(random() % 10);
    for (uint32_t row = 0; row < 28; ++row)
      for (uint32_t col = 0; col < 28; ++col) {
        const bool bar = row / 2 == 2u + labels[i] && col >= 4 && col < 24;
        images.put(static_cast<char>(bar ? 160 + random() % 96 : random() % 160));
      }
  }
  std::ofstream label_file(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
  for (uint32_t v : {2049u, count}) put_u32(label_file, v);
  for (uint8_t label : labels) label_file.put(static_cast<char>(label));
}

// The course's programs on those images, two short epochs, deterministic kernels. Each run gets its
// own folder (its own snapshot) under one temporary folder with the data.
class CoursePrograms {
 public:
  CoursePrograms() {
    write_learnable_idx_pair(dir_.path, "train", 2048, 1);
    write_learnable_idx_pair(dir_.path, "t10k", 512, 2);
  }
  std::string common() const {
    return "--dataset mnist --data-dir " + dir_.path +
           " --device cuda --deterministic --batch-size 32 --seed 7 --threads 1 --log-every 0";
  }
  // One process, no launcher; returns its exit code. Its output goes to <name>/out.log.
  int run(const std::string& name, const std::string& program_and_args) {
    ::mkdir(folder(name).c_str(), 0755);
    return run_shell("cd " + folder(name) + " && exec " + program_and_args + " " + common() + " > out.log 2>&1",
                     std::chrono::seconds(300));
  }
  // Two ranks on GPU 0 with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...), so no
  // launcher has to be installed; the output of rank r goes to <name>/rank<r>.log. True if both exit 0.
  bool run_two_ranks(const std::string& name, const std::string& program_and_args) {
    ::mkdir(folder(name).c_str(), 0755);
    const std::string port = std::to_string(free_port());
    std::string command = "cd " + folder(name) + " || exit 1; ";  // not `cd && rank0 &`: that cd is rank 0's alone
    for (int r = 0; r < 2; ++r)
      command += "RANK=" + std::to_string(r) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(r) +
                 " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + program_and_args + " " +
                 common() + " > rank" + std::to_string(r) + ".log 2>&1 & ";
    command += "wait %1; a=$?; wait %2; b=$?; echo $a $b > codes";
    return run_shell(command, std::chrono::seconds(300)) == 0 && read_file(folder(name) + "/codes") == "0 0\n";
  }
  std::string log(const std::string& name, const std::string& file = "out.log") const {
    return folder(name) + "/" + file;
  }
  std::string folder(const std::string& name) const { return dir_.path + "/" + name; }

 private:
  TempDir dir_;
};

// The train loss of every epoch line, in order.
std::vector<double> train_losses(const std::string& log) {
  const std::string text = read_file(log);
  static const std::regex line("\nEpoch \\d+ \\| train loss ([0-9.eE+-]+)");
  std::vector<double> losses;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it)
    losses.push_back(std::stod((*it)[1].str()));
  return losses;
}

// Trained on GPU 0: rank 0's rank table lists it, and the epoch lines carry the [GPU0] tag.
bool trained_on_gpu(const std::string& log) {
  const std::string text = read_file(log);
  return std::regex_search(text, std::regex("\n0 +\\| .*\\| cuda:0 \\(")) && contains(text, "[GPU0] Epoch 1");
}

const std::string kStep0 = kBin + "/step0_single_gpu 2 1";
const std::string kStep4 = kBin + "/solutions/step4_sharded 2 1";
const std::string kTrainer = kBin + "/solutions/step5_trainer --epochs 2";

}  // namespace

// --strategy single is step 0; --strategy ddp with one NCCL rank is too (one-rank DDP is the identity:
// the gradient divided by 1, the bucket views, the allreduce of one). Dropout's masks included.
TEST(GpuTrainer, SingleAndOneNcclRankDdpEndWithStepZerosChecksum) {
  REQUIRE_GPUS(1);
  CoursePrograms programs;
  ASSERT_EQ(programs.run("step0", kStep0), 0) << read_file(programs.log("step0"));
  ASSERT_EQ(programs.run("single", kTrainer + " --strategy single"), 0) << read_file(programs.log("single"));
  ASSERT_EQ(programs.run("ddp", kTrainer + " --strategy ddp --backend nccl"), 0) << read_file(programs.log("ddp"));
  const std::string expected = checksum_in(programs.log("step0"));
  ASSERT_FALSE(expected.empty()) << read_file(programs.log("step0"));
  for (const std::string run : {"single", "ddp"}) {
    EXPECT_TRUE(trained_on_gpu(programs.log(run))) << read_file(programs.log(run));
    EXPECT_EQ(checksum_in(programs.log(run)), expected) << "--strategy " << run << " vs step 0";
  }
  const auto losses = train_losses(programs.log("ddp"));
  ASSERT_EQ(losses.size(), 2u) << read_file(programs.log("ddp"));
  EXPECT_LT(losses[1], losses[0]);
}

// --cuda-graph: the trainer's step replayed from one CUDA graph (3 eager warm-up steps, then 125 of the
// 2 x 64 steps replayed) ends where the eager run ends, on one NCCL rank. Not required bit for bit:
// the second epoch's rate (0.7, StepLR) is a float32 device tensor multiplied in a kernel of its own
// in the captured step, a host scalar inside the eager step's add, which may round differently in
// the last bit; stated tolerance 1e-5 of the checksum (not yet run on a GPU).
TEST(GpuTrainer, CudaGraphEndsWithTheEagerChecksumOnOneNcclRank) {
  REQUIRE_GPUS(1);
  CoursePrograms programs;
  ASSERT_EQ(programs.run("eager", kTrainer + " --strategy ddp --backend nccl"), 0) << read_file(programs.log("eager"));
  ASSERT_EQ(programs.run("graph", kTrainer + " --strategy ddp --backend nccl --cuda-graph"), 0)
      << read_file(programs.log("graph"));
  const std::string log = read_file(programs.log("graph"));
  EXPECT_TRUE(contains(log, "CUDA graph: 125 steps replayed, 3 eager")) << log;
  EXPECT_TRUE(trained_on_gpu(programs.log("graph"))) << log;
  const std::string eager = checksum_in(programs.log("eager")), graphed = checksum_in(programs.log("graph"));
  ASSERT_FALSE(eager.empty() || graphed.empty()) << log;
  EXPECT_NEAR(std::stod(graphed), std::stod(eager), 1e-5 * std::abs(std::stod(eager)))
      << "graphed " << graphed << " vs eager " << eager;
  const auto losses = train_losses(programs.log("graph"));
  ASSERT_EQ(losses.size(), 2u) << log;
  EXPECT_LT(losses[1], losses[0]);
}

// --strategy zero1 and zero2 with one NCCL rank end with step 4's checksum (--zero 2, one rank), and
// with each other's (one rank: the same gradients reach the same AdamW); the loss falls.
TEST(GpuTrainer, ZeroStrategiesOnOneNcclRankEndWithStep4sChecksum) {
  REQUIRE_GPUS(1);
  CoursePrograms programs;
  ASSERT_EQ(programs.run("step4", kStep4 + " --zero 2 --backend nccl"), 0) << read_file(programs.log("step4"));
  const std::string expected = checksum_in(programs.log("step4"));
  ASSERT_FALSE(expected.empty()) << read_file(programs.log("step4"));
  for (const std::string strategy : {"zero1", "zero2"}) {
    ASSERT_EQ(programs.run(strategy, kTrainer + " --strategy " + strategy + " --backend nccl"), 0)
        << read_file(programs.log(strategy));
    const std::string log = programs.log(strategy);
    EXPECT_TRUE(trained_on_gpu(log)) << read_file(log);
    EXPECT_TRUE(contains(read_file(log), "ZeRO stage")) << read_file(log);
    EXPECT_EQ(checksum_in(log), expected) << "--strategy " << strategy << " vs step 4 --zero 2";
    const auto losses = train_losses(log);
    ASSERT_EQ(losses.size(), 2u) << read_file(log);
    EXPECT_LT(losses[1], losses[0]) << strategy;
    EXPECT_TRUE(ddp::path_exists(programs.folder(strategy) + "/snapshot-step5-solution.pt.g2.rank0-of-1"))
        << "no shard of the last snapshot";
  }
}

// The one-GPU node's launch of two ranks: both on cuda:0 over Gloo (torchrun --nproc_per_node=2 ...
// --device cuda --backend gloo). The trainer's zero2 ends on both ranks with step 4's checksum under
// the same launch; each rank wrote its shard.
TEST(GpuTrainer, Zero2TwoRanksOnOneGpuOverGlooEndWithStep4sChecksum) {
  REQUIRE_GPUS(1);
  CoursePrograms programs;
  ASSERT_TRUE(programs.run_two_ranks("step4", kStep4 + " --zero 2 --device cuda --backend gloo"))
      << read_file(programs.log("step4", "rank0.log")) << read_file(programs.log("step4", "rank1.log"));
  ASSERT_TRUE(programs.run_two_ranks("zero2", kTrainer + " --strategy zero2 --backend gloo"))
      << read_file(programs.log("zero2", "rank0.log")) << read_file(programs.log("zero2", "rank1.log"));
  const std::string expected = checksum_in(programs.log("step4", "rank0.log"));
  ASSERT_FALSE(expected.empty()) << read_file(programs.log("step4", "rank0.log"));
  for (const std::string program : {"step4", "zero2"})
    for (const std::string rank_log : {"rank0.log", "rank1.log"})
      EXPECT_EQ(checksum_in(programs.log(program, rank_log)), expected) << program << " " << rank_log;
  const std::string rank0 = read_file(programs.log("zero2", "rank0.log"));
  EXPECT_TRUE(std::regex_search(rank0, std::regex("\n1 +\\| .*\\| cuda:0 \\("))) << rank0;  // both ranks on GPU 0
  EXPECT_TRUE(trained_on_gpu(programs.log("zero2", "rank0.log"))) << rank0;
  const auto losses = train_losses(programs.log("zero2", "rank0.log"));
  ASSERT_EQ(losses.size(), 2u) << rank0;
  EXPECT_LT(losses[1], losses[0]);
  for (const char* shard : {"/snapshot-step5-solution.pt.g2.rank0-of-2", "/snapshot-step5-solution.pt.g2.rank1-of-2"})
    EXPECT_TRUE(ddp::path_exists(programs.folder("zero2") + shard)) << shard;
}
