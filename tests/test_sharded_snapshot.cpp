// Sharded snapshots of ZeRO training (ddp/sharded_snapshot.h), with real processes (Gloo):
//   * resuming with the same world size continues bit for bit as if never stopped;
//   * resuming with another world size (2 -> 3 under ZeRO-2, 3 -> 2 under ZeRO-1) reshards: the run
//     ends within 1e-9 of one process training without a break, and every rank's new slice of
//     Adam's moments equals that process's optimizer state;
//   * a missing, corrupt or foreign shard is refused on every rank with a message naming it, and
//     nothing is changed; a plain module loads the weights from all shards;
//   * a program's snapshot records who wrote it (step, exercise or solution, dataset): another
//     program's is refused naming both, the same program resumes, --fresh ignores the file.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "course/from_options.h"
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value
#include "ddp/sharded_snapshot.h"
#include "multiprocess.h"

// A named namespace, not an anonymous one: the test files are compiled in batches (unity build).
namespace sharded_snapshot {

constexpr int64_t kBatch = 24;
constexpr int kStepsBefore = 6, kStepsAfter = 6;
constexpr double kTolerance = 1e-9;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    l1 = register_module("l1", torch::nn::Linear(16, 64));
    l2 = register_module("l2", torch::nn::Linear(64, 64));
    l3 = register_module("l3", torch::nn::Linear(64, 4));
    norm = register_module("norm", torch::nn::BatchNorm1d(64));  // buffers travel too
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return l3(torch::tanh(l2(torch::tanh(norm(l1(x)))))); }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};

std::shared_ptr<NetImpl> make_net(uint64_t seed) {
  torch::manual_seed(seed);
  return std::make_shared<NetImpl>();
}

std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  auto gen = at::detail::createCPUGenerator(500 + step);
  return {torch::randn({kBatch, 16}, gen, torch::kFloat64), torch::randn({kBatch, 4}, gen, torch::kFloat64)};
}

torch::Tensor shard(const torch::Tensor& t, int rank, int world) {
  const int64_t per = t.size(0) / world;
  return t.narrow(0, rank * per, per);
}

const ddp::AdamOptions kAdam{2e-3, 0.8, 0.999, 1e-8, 0.01, true};

// ZeRO training of steps [first, last) on this rank's shards. (BatchNorm in eval mode: its running
// statistics would differ per rank; they are buffers, saved from rank 0.)
void train(ddp::ZeroDataParallel<NetImpl>& model, ddp::ShardedAdamW& optimizer, int first, int last, int rank,
           int world) {
  for (int step = first; step < last; ++step) {
    auto [x, y] = batch(step);
    optimizer.zero_grad();
    torch::mse_loss(model->forward(shard(x, rank, world)), shard(y, rank, world)).backward();
    optimizer.clip_grad_norm(1.0);
    optimizer.step();
  }
}

// One process, the whole batch, LibTorch's AdamW: what every resumed run must end at.
std::pair<std::shared_ptr<NetImpl>, std::unique_ptr<torch::optim::AdamW>> reference_run(int steps) {
  auto net = make_net(100);
  net->eval();
  auto opt = std::make_unique<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(kAdam.lr)
                                                                          .betas({kAdam.beta1, kAdam.beta2})
                                                                          .eps(kAdam.eps)
                                                                          .weight_decay(kAdam.weight_decay));
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step);
    opt->zero_grad();
    torch::mse_loss(net->forward(x), y).backward();
    torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
    opt->step();
  }
  return {net, std::move(opt)};
}

double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

// Max difference between this rank's moment slices and a whole-model AdamW's state, cut the same way.
double moment_difference(ddp::ShardedAdamW& optimizer, NetImpl& reference_net, torch::optim::AdamW& reference,
                         int rank) {
  double worst = 0;
  const auto buckets = optimizer.state().sharded_groups();
  const auto params = reference_net.parameters();
  for (size_t k = 0; k < buckets.size(); ++k) {
    for (int second = 0; second < 2; ++second) {
      auto flat = torch::zeros({buckets[k].padded_numel}, torch::kFloat64);
      for (size_t s = 0; s < buckets[k].params.size(); ++s) {
        const auto& p = params[buckets[k].params[s]];
        auto& st = static_cast<torch::optim::AdamWParamState&>(*reference.state().at(p.unsafeGetTensorImpl()));
        flat.narrow(0, buckets[k].offsets[s], p.numel()).copy_((second ? st.exp_avg_sq() : st.exp_avg()).reshape({-1}));
      }
      const auto mine = second ? optimizer.exp_avg_sq_shards()[k] : optimizer.exp_avg_shards()[k];
      worst = std::max(worst, (mine - flat.narrow(0, rank * mine.numel(), mine.numel())).abs().max().item<double>());
    }
  }
  return worst;
}

ddp::ZeroOptions zero_options(int stage) {
  ddp::ZeroOptions o;
  o.stage = stage;
  o.bucket_mb = 0.02;  // several buckets
  return o;
}

TEST(ShardedSnapshot, SameWorldSizeResumeIsExact) {
  const std::string dir = ddp_test::shared_test_dir();
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [&](int rank, auto pg) {
                  const std::string path = dir + "/snap.json";
                  auto net = make_net(100);
                  net->eval();
                  ddp::ZeroDataParallel<NetImpl> model(net, pg, zero_options(2));
                  ddp::ShardedAdamW optimizer(model, kAdam);
                  train(model, optimizer, 0, kStepsBefore, rank, 2);
                  torch::manual_seed(1234 + rank);  // RNG state goes into the shard too
                  ddp::save_sharded_snapshot(path, optimizer, {1, 3, 2});
                  const auto draw_after_save = torch::rand({3});
                  train(model, optimizer, kStepsBefore, kStepsBefore + kStepsAfter, rank, 2);

                  auto net2 = make_net(555);  // another start: all of it must come from the snapshot
                  net2->eval();
                  ddp::ZeroDataParallel<NetImpl> model2(net2, pg, zero_options(2));
                  ddp::ShardedAdamW optimizer2(model2, kAdam);
                  const auto state = ddp::load_sharded_snapshot(path, optimizer2);
                  if (!state || state->epochs_run != 1 || state->step_in_epoch != 3 || state->world_size != 2) {
                    std::fprintf(stderr, "rank %d: training state not restored\n", rank);
                    return 1;
                  }
                  const bool rng_ok = torch::equal(torch::rand({3}), draw_after_save);
                  const bool steps_ok = optimizer2.steps_taken() == kStepsBefore;
                  train(model2, optimizer2, kStepsBefore, kStepsBefore + kStepsAfter, rank, 2);
                  const double diff = max_difference(*net, *net2);
                  bool moments_equal = true;
                  for (size_t k = 0; k < optimizer.exp_avg_shards().size(); ++k)
                    moments_equal &= torch::equal(optimizer.exp_avg_shards()[k], optimizer2.exp_avg_shards()[k]) &&
                                     torch::equal(optimizer.exp_avg_sq_shards()[k], optimizer2.exp_avg_sq_shards()[k]);
                  const bool buffers_equal = torch::equal(net->norm->running_mean, net2->norm->running_mean);
                  std::printf(
                      "rank %d: same world size, max |resumed - uninterrupted| = %g, moments %s, "
                      "RNG %s, steps %s\n",
                      rank, diff, moments_equal ? "equal" : "DIFFER", rng_ok ? "restored" : "NOT restored",
                      steps_ok ? "restored" : "NOT restored");
                  return diff == 0 && moments_equal && rng_ok && steps_ok && buffers_equal ? 0 : 1;
                }),
            0);
  std::ifstream manifest(dir + "/snap.json");
  const std::string text((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"snap.json.g1.rank1-of-2\""), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find("\"crc32\""), std::string::npos);
  ddp::remove_tree(dir);
}

// Save with `from` ranks under one ZeRO stage, resume with `to` ranks under the other.
void reshard(int from, int to, int stage_before, int stage_after) {
  const std::string dir = ddp_test::shared_test_dir();
  const std::string path = dir + "/snap.json";
  EXPECT_EQ(ddp_test::run_ranks(
                from,
                [&](int rank, auto pg) {
                  auto net = make_net(100);
                  net->eval();
                  ddp::ZeroDataParallel<NetImpl> model(net, pg, zero_options(stage_before));
                  ddp::ShardedAdamW optimizer(model, kAdam);
                  train(model, optimizer, 0, kStepsBefore, rank, from);
                  ddp::save_sharded_snapshot(path, optimizer, {0, 0, from});
                  return 0;
                },
                std::chrono::seconds(60), "save"),
            0);
  EXPECT_EQ(ddp_test::run_ranks(
                to,
                [&](int rank, auto pg) {
                  auto net = make_net(555 + rank);
                  net->eval();
                  ddp::ZeroDataParallel<NetImpl> model(net, pg, zero_options(stage_after));
                  ddp::ShardedAdamW optimizer(model, kAdam);
                  if (!ddp::load_sharded_snapshot(path, optimizer)) return 1;
                  auto [at_save, at_save_optimizer] = reference_run(kStepsBefore);
                  const double moments = moment_difference(optimizer, *at_save, *at_save_optimizer, rank);
                  train(model, optimizer, kStepsBefore, kStepsBefore + kStepsAfter, rank, to);
                  auto [reference, unused] = reference_run(kStepsBefore + kStepsAfter);
                  const double diff = max_difference(*net, *reference);
                  std::printf(
                      "rank %d: saved by %d ranks (ZeRO-%d), resumed by %d (ZeRO-%d): moments within %.3g of "
                      "one process's, max |resumed - one process| = %.3g after %d steps\n",
                      rank, from, stage_before, to, stage_after, moments, diff, kStepsBefore + kStepsAfter);
                  return diff <= kTolerance && moments <= kTolerance ? 0 : 1;
                },
                std::chrono::seconds(60), "resume"),
            0);
  ddp::remove_tree(dir);
}

TEST(ShardedSnapshot, ReshardsFromTwoToThreeRanks) { reshard(2, 3, 2, 2); }
TEST(ShardedSnapshot, ReshardsFromThreeToTwoRanksAndStage2To1) { reshard(3, 2, 2, 1); }

bool refused(ddp::ShardedAdamW& optimizer, const std::string& path, const std::string& expected) {
  try {
    ddp::load_sharded_snapshot(path, optimizer);
  } catch (const ddp::Error& e) {
    if (std::string(e.what()).find(expected) != std::string::npos) return true;
    std::fprintf(stderr, "unexpected message: %s\n", e.what());
    return false;
  }
  std::fprintf(stderr, "loaded, expected a refusal naming \"%s\"\n", expected.c_str());
  return false;
}

void flip_byte(const std::string& file, long offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(offset);
  f.write(&c, 1);
}

TEST(ShardedSnapshot, MissingCorruptOrForeignShardIsRefusedByName) {
  const std::string dir = ddp_test::shared_test_dir();
  EXPECT_EQ(
      ddp_test::run_ranks(2,
                          [&](int rank, auto pg) {
                            const std::string path = dir + "/snap.json";
                            auto net = make_net(100);
                            net->eval();
                            ddp::ZeroDataParallel<NetImpl> model(net, pg, zero_options(2));
                            ddp::ShardedAdamW optimizer(model, kAdam);
                            train(model, optimizer, 0, 2, rank, 2);
                            ddp::save_sharded_snapshot(path, optimizer, {0, 0, 2});
                            const std::string g1_rank1 = dir + "/snap.json.g1.rank1-of-2";
                            if (rank == 0 && ::link(g1_rank1.c_str(), (dir + "/old-rank1").c_str()) != 0) return 1;
                            train(model, optimizer, 2, 4, rank, 2);
                            ddp::save_sharded_snapshot(path, optimizer, {0, 0, 2});  // generation 2
                            const std::string shard0 = dir + "/snap.json.g2.rank0-of-2";
                            const std::string shard1 = dir + "/snap.json.g2.rank1-of-2";
                            bool ok = !ddp::path_exists(g1_rank1);  // the previous generation is gone
                            const auto before = net->l1->weight.clone();

                            // A plain module gets the weights of all shards.
                            auto plain = make_net(999);
                            ddp::load_sharded_model_weights(path, *plain);
                            ok &= max_difference(*plain, *net) == 0;
                            pg->barrier();  // every rank has read all shards before one goes away

                            if (rank == 0) ::rename(shard1.c_str(), (shard1 + ".away").c_str());
                            pg->barrier();
                            ok &= refused(optimizer, path, "shard '" + shard1 + "' (rank 1 of 2) that is missing");
                            pg->barrier();
                            if (rank == 0) {
                              ::rename((shard1 + ".away").c_str(), shard1.c_str());
                              flip_byte(shard0, 200);
                            }
                            pg->barrier();
                            ok &= refused(optimizer, path,
                                          "shard '" + shard0 + "' (rank 0 of 2) that is corrupt (checksum mismatch)");
                            pg->barrier();
                            if (rank == 0) {
                              flip_byte(shard0, 200);  // repaired
                              ::rename(shard1.c_str(), (shard1 + ".away").c_str());
                              ::rename((dir + "/old-rank1").c_str(), shard1.c_str());  // a valid shard, another save's
                            }
                            pg->barrier();
                            ok &= refused(optimizer, path, "shard '" + shard1 + "' (rank 1 of 2) with checksum");
                            ok &= refused(optimizer, path, "it belongs to another save");
                            ok &= torch::equal(before, net->l1->weight);  // refusals changed nothing
                            pg->barrier();
                            if (rank == 0) ::rename((shard1 + ".away").c_str(), shard1.c_str());
                            pg->barrier();
                            ok &= ddp::load_sharded_snapshot(path, optimizer).has_value();  // whole again: loads
                            return ok ? 0 : 1;
                          }),
      0);
  ddp::remove_tree(dir);
}

TEST(ShardedSnapshot, NoSnapshotIsNoneAndAnotherModelIsRefused) {
  const std::string dir = ddp_test::shared_test_dir();
  EXPECT_EQ(ddp_test::run_ranks(2,
                                [&](int rank, auto pg) {
                                  const std::string path = dir + "/snap.json";
                                  auto net = make_net(1);
                                  ddp::ZeroDataParallel<NetImpl> model(net, pg, zero_options(1));
                                  ddp::ShardedAdamW optimizer(model, kAdam);
                                  bool ok = !ddp::load_sharded_snapshot(path, optimizer).has_value();
                                  train(model, optimizer, 0, 1, rank, 2);
                                  ddp::save_sharded_snapshot(path, optimizer, {0, 0, 2});
                                  torch::manual_seed(2);
                                  auto other = std::make_shared<torch::nn::LinearImpl>(16, 5);
                                  other->to(torch::kFloat64);
                                  ddp::ZeroDataParallel<torch::nn::LinearImpl> other_model(other, pg, zero_options(1));
                                  ddp::ShardedAdamW other_optimizer(other_model, kAdam);
                                  ok &= refused(other_optimizer, path, "it was written by another model");
                                  return ok ? 0 : 1;
                                }),
            0);
  ddp::remove_tree(dir);
}

ddpw::Options run_of(const std::string& dir, const std::string& name, const std::string& kind, int step,
                     const std::string& dataset = "synthetic") {
  ddpw::Options o;
  o.program.name = name;
  o.program.kind = kind;
  o.program.step = step;
  o.dataset = dataset;
  o.snapshot_path = dir + "/shared.json";  // one path for all: what --snapshot (or an old default) did
  return o;
}

TEST(ShardedSnapshot, AnotherProgramsSnapshotIsRefusedNamingBoth) {
  const std::string dir = ddp_test::shared_test_dir();
  EXPECT_EQ(ddp_test::run_ranks(
                2,
                [&](int rank, auto pg) {
                  auto net = make_net(7);
                  ddp::ZeroDataParallel<NetImpl> model(net, pg, zero_options(2));
                  ddp::ShardedAdamW optimizer(model, kAdam);
                  train(model, optimizer, 0, 2, rank, 2);
                  const auto solution = run_of(dir, "step4_sharded", "solution", 4);
                  ddpw::save_sharded_snapshot(solution, optimizer, {3, 0, 2});
                  const auto before = net->l1->weight.clone();
                  auto refuses = [&](const ddpw::Options& reader, const std::string& expected) {
                    try {
                      ddpw::load_sharded_snapshot(reader, optimizer);
                    } catch (const ddp::Error& e) {
                      const std::string all = e.message() + " (fix: " + e.hint() + ")";
                      if (all.find(expected) != std::string::npos &&
                          all.find(ddp::setting_name(ddp::Setting::kFreshStart)) != std::string::npos)
                        return true;
                      std::fprintf(stderr, "unexpected message: %s\n", all.c_str());
                      return false;
                    }
                    std::fprintf(stderr, "loaded, expected a refusal naming \"%s\"\n", expected.c_str());
                    return false;
                  };
                  bool ok = refuses(run_of(dir, "step4_sharded", "exercise", 4),
                                    "was written by step4_sharded (solution) training synthetic, not by "
                                    "this run, step4_sharded (exercise) training synthetic");
                  ok &= refuses(run_of(dir, "step5_trainer", "solution", 5), "written by step4_sharded (solution)");
                  ok &= refuses(run_of(dir, "step4_sharded", "solution", 4, "mnist"),
                                "not by this run, step4_sharded (solution) training mnist");
                  ddp::save_sharded_snapshot(dir + "/anonymous.json", optimizer, {3, 0, 2});
                  auto reads_anonymous = solution;
                  reads_anonymous.snapshot_path = dir + "/anonymous.json";
                  ok &= refuses(reads_anonymous, "written by a program that recorded no name");
                  ok &= torch::equal(before, net->l1->weight);  // refusals changed nothing
                  ok &= ddp::sharded_snapshot_writer(solution.snapshot_path) ==
                        "step4_sharded (solution) training synthetic";
                  ok &= ddp::sharded_snapshot_writer(dir + "/anonymous.json").empty();
                  auto fresh = run_of(dir, "step4_sharded", "exercise", 4);
                  fresh.fresh = true;
                  ok &= !ddpw::load_sharded_snapshot(fresh, optimizer).has_value();
                  const auto state = ddpw::load_sharded_snapshot(solution, optimizer);  // its writer resumes
                  ok &= state && state->epochs_run == 3;
                  return ok ? 0 : 1;
                }),
            0);
  std::ifstream manifest(dir + "/shared.json");
  const std::string text((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"version\": 2"), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find("\"writer\": \"step4_sharded (solution)\""), std::string::npos) << text.substr(0, 400);
  ddp::remove_tree(dir);
}

}  // namespace sharded_snapshot
