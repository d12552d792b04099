// Buffers and SyncBatchNorm against Python (the set-up's venv, tests/python/), 2 and 3 CPU ranks:
//   * DistributedDataParallel's buffers: the same BatchNorm model (BnNet here, its twin in
//     tests/python/ddp_buffers.py), the same initial weights (ddp::export_weights -> torch.load),
//     the same uneven batches per rank, the same schedule (training steps, a no_sync() gradient
//     accumulation, evaluations under no_grad): every rank ends with the parameters, buffers and
//     evaluation outputs of the same rank of Python's DistributedDataParallel (Gloo, 2 processes),
//     with broadcast_buffers on and off; and on differs from off (the check has teeth);
//   * SyncBatchNorm: the scenarios of batchnorm_scenarios.h against Python's BatchNorm over the
//     concatenation of the ranks' batches (Python's SyncBatchNorm refuses CPU tensors; the real
//     one is compared on CUDA in test_gpu_batchnorm.cpp).
// Registered under the label integration (tests/CMakeLists.txt). Without a python3 with torch
// found by the configure they are SKIPPED, naming the fix.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "batchnorm_scenarios.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/spawn.h"
#include "ddp/torch_pickle.h"
#include "ddp/weights_io.h"
#include "multiprocess.h"

namespace batchnorm_python_tests {

#ifdef DDPW_TEST_PYTHON
const char* const kPython = DDPW_TEST_PYTHON;
#else
const char* const kPython = "";
#endif

#define REQUIRE_PYTHON()                                                                                               \
  do {                                                                                                                 \
    if (std::string(kPython).empty())                                                                                  \
      GTEST_SKIP() << "no python3 with torch and numpy was found by the configure (run scripts/setup.sh, then cmake)"; \
  } while (0)

void write_dict(const std::string& path, const ddp::TensorDict& dict) {
  std::ofstream(path, std::ios::binary) << ddp::tensor_dict_to_bytes(dict);
}

ddp::TensorDict read_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return ddp::tensor_dict_from_bytes(std::string(std::istreambuf_iterator<char>(in), {}), path);
}

// Runs tests/python/<script> with `args` (300 s at most); its exit code.
int run_python(const std::string& script, const std::string& args) {
  const std::string command = "timeout 300 '" + std::string(kPython) + "' '" + DDPW_TEST_PYTHON_DIR + "/" + script +
                              "' " + args + " > /dev/null";  // stderr stays: a failure shows its traceback
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// ---- DistributedDataParallel's buffers ---------------------------------------------------------

// The twin of BnNet in tests/python/ddp_buffers.py. Input [N, 3, 6, 6].
struct BnNetImpl : torch::nn::Module {
  BnNetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(3, 4, 3));
    bn2d = register_module("bn2d", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * 4 * 4, 8));
    bn1d = register_module("bn1d", torch::nn::BatchNorm1d(torch::nn::BatchNormOptions(8).momentum(std::nullopt)));
    out = register_module("out", torch::nn::Linear(8, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(bn2d(conv(x)));
    h = torch::relu(bn1d(fc(torch::flatten(h, 1))));
    return out(h);
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn2d{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn1d{nullptr};
  torch::nn::Linear out{nullptr};
};

enum Step : int64_t { kTrain = 0, kAccumulate = 1, kEvaluate = 2 };  // ddp_buffers.py's TRAIN, ...
const std::vector<int64_t> kSchedule{kTrain, kTrain, kAccumulate, kTrain, kEvaluate, kTrain, kAccumulate, kEvaluate};
constexpr double kLr = 0.05, kMomentum = 0.9;
constexpr double kBuffersTolerance = 1e-5;  // float32, 8 steps, two programs' kernels alike

// Rank r's micro-batch sizes (uneven: rank 0 5 and 4 samples, rank 1 3 and 2) and the batches.
ddp::TensorDict make_batches(int world) {
  auto gen = at::detail::createCPUGenerator(2027);
  ddp::TensorDict in;
  for (size_t s = 0; s < kSchedule.size(); ++s)
    for (int r = 0; r < world; ++r)
      for (int m = 0; m < (kSchedule[s] == kAccumulate ? 2 : 1); ++m) {
        const int64_t n = (r == 0 ? 5 : 3) - m;
        const std::string key = std::to_string(s) + "." + std::to_string(r) + "." + std::to_string(m);
        in.emplace_back("x." + key, torch::randn({n, 3, 6, 6}, gen) * (1.0 + r) + 0.5 * r);
        in.emplace_back("y." + key, torch::randn({n, 2}, gen));
      }
  in.emplace_back("schedule", torch::tensor(kSchedule, torch::kInt64));
  in.emplace_back("lr", torch::tensor(kLr, torch::kFloat64));
  in.emplace_back("momentum", torch::tensor(kMomentum, torch::kFloat64));
  return in;
}

// This rank's run of the schedule: its state_dict and evaluation outputs, keyed as Python's file.
ddp::TensorDict run_schedule(int rank, const std::shared_ptr<ddp::ProcessGroup>& pg, const std::string& dir,
                             const ddp::TensorDict& in, bool broadcast) {
  auto net = std::make_shared<BnNetImpl>();
  ddp::import_weights(dir + "/weights.pt", *net);
  ddp::DdpOptions options;
  options.broadcast_buffers = broadcast;
  ddp::DistributedDataParallel<BnNetImpl> model(net, pg, options);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
  ddp::TensorDict outputs;
  for (size_t s = 0; s < kSchedule.size(); ++s) {
    const std::string sr = std::to_string(s) + "." + std::to_string(rank) + ".";
    if (kSchedule[s] == kEvaluate) {
      torch::NoGradGuard no_grad;
      net->eval();
      outputs.emplace_back("eval." + std::to_string(s), model(bn_scenarios::at(in, "x." + sr + "0")));
      net->train();
      continue;
    }
    opt.zero_grad();
    const int micro = kSchedule[s] == kAccumulate ? 2 : 1;
    for (int m = 0; m < micro; ++m) {
      auto step = [&] {
        auto x = bn_scenarios::at(in, "x." + sr + std::to_string(m));
        torch::mse_loss(model(x), bn_scenarios::at(in, "y." + sr + std::to_string(m))).backward();
      };
      if (m < micro - 1) {
        auto quiet = model.no_sync();
        step();
      } else {
        step();
      }
    }
    opt.step();
  }
  auto state = ddp::state_dict(*net);
  state.insert(state.end(), outputs.begin(), outputs.end());
  return state;
}

// The largest difference over the keys of `python` (every one must be in `mine`).
double worst_difference(const ddp::TensorDict& mine, const ddp::TensorDict& python, const std::string& only = "") {
  double worst = 0;
  for (const auto& [key, t] : python)
    if (only.empty() || key.find(only) != std::string::npos)
      worst = std::max(worst, bn_scenarios::difference(bn_scenarios::at(mine, key), t, key));
  return worst;
}

TEST(PythonBridgeDdpBuffers, EveryRankEndsAsPythonsDdp) {
  REQUIRE_PYTHON();
  constexpr int kWorld = 2;
  const std::string dir = ddp_test::shared_test_dir();
  ASSERT_FALSE(dir.empty());
  if (!ddp::is_spawned_worker()) {
    torch::manual_seed(11);
    BnNetImpl start;
    ddp::export_weights(dir + "/weights.pt", start);
    write_dict(dir + "/inputs.pt", make_batches(kWorld));
    ASSERT_EQ(run_python("ddp_buffers.py", "'" + dir + "' " + std::to_string(kWorld)), 0)
        << "Python's DistributedDataParallel run failed (its traceback is above)";
  }
  const int rc = ddp_test::run_ranks(kWorld, [&](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
    torch::set_num_threads(1);  // as the Python ranks
    const auto in = read_dict(dir + "/inputs.pt");
    int failures = 0;
    ddp::TensorDict on;
    for (bool broadcast : {true, false}) {
      const auto mine = run_schedule(rank, pg, dir, in, broadcast);
      const auto python =
          read_dict(dir + "/python." + (broadcast ? "on" : "off") + ".rank" + std::to_string(rank) + ".pt");
      const double buffers = worst_difference(mine, python, "running_"), all = worst_difference(mine, python);
      std::printf(
          "[rank %d] broadcast_buffers=%d vs Python's DDP after %zu steps: max |diff| running stats %.3g, "
          "parameters, buffers and evaluations %.3g (tolerance %g)\n",
          rank, broadcast, kSchedule.size(), buffers, all, kBuffersTolerance);
      failures += all <= kBuffersTolerance ? 0 : 1;
      for (const auto& [key, t] : python)
        if (key.find("num_batches_tracked") != std::string::npos && !torch::equal(bn_scenarios::at(mine, key), t))
          ++failures;
      if (broadcast) on = mine;
    }
    // Teeth: on rank 1 the broadcast changes the statistics far beyond the tolerance.
    const auto python_off = read_dict(dir + "/python.off.rank" + std::to_string(rank) + ".pt");
    const double apart = worst_difference(on, python_off, "running_");
    std::printf("[rank %d] running stats with broadcast vs Python without: %.3g apart\n", rank, apart);
    if (rank == 1 && apart < 100 * kBuffersTolerance) ++failures;
    return failures;
  });
  EXPECT_EQ(rc, 0);
  if (!ddp::is_spawned_worker()) ddp::remove_tree(dir);
}

// ---- SyncBatchNorm against Python's BatchNorm over all ranks' batches ---------------------------

TEST(PythonBridgeSyncBatchNorm, EqualsPythonsBatchNormOverAllRanksBatches) {
  REQUIRE_PYTHON();
  const std::string dir = ddp_test::shared_test_dir();
  ASSERT_FALSE(dir.empty());
  const auto configs = bn_scenarios::configs();
  int failures = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto& config = configs[i];
    const std::string folder = dir + "/" + std::to_string(i);
    if (!ddp::is_spawned_worker()) {
      ASSERT_EQ(::mkdir(folder.c_str(), 0700), 0);
      write_dict(folder + "/inputs.pt", bn_scenarios::make_inputs(config));
      ASSERT_EQ(run_python("sync_batchnorm_reference.py", "batchnorm '" + folder + "'"), 0)
          << config.name << ": Python's BatchNorm reference failed (its traceback is above)";
    }
    ddp_test::RankSetup setup;
    setup.n = static_cast<int>(config.sizes.size());
    setup.phase = config.name;
    failures += ddp_test::run_ranks(setup, [&](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
      return bn_scenarios::run_rank(config, rank, pg, read_dict(folder + "/inputs.pt"),
                                    read_dict(folder + "/python.pt"), true);
    });
  }
  EXPECT_EQ(failures, 0);
  if (!ddp::is_spawned_worker()) ddp::remove_tree(dir);
}

}  // namespace batchnorm_python_tests
