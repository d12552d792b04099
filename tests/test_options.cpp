// The command line every step shares (course/options.h): the upstream positional form, defaults, the
// dataset-dependent batch size, ranges and non-numbers, --device forms, the per-step distributed
// options, and the start-up check that the snapshot and metrics files can be written.
// A bad value exits 2 with one line naming the option and the fix: death tests check that line.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "course/options.h"
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/launch_env.h"
#include "ddp/setting_names.h"
#include "ddp/threads.h"

namespace {

using ::testing::ExitedWithCode;

ddpw::Options parse(std::vector<std::string> args, unsigned groups = ddpw::kTrainingOptions) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ddpw::parse_options(static_cast<int>(argv.size()), argv.data(), "options test", groups);
}

// Each test runs in a fresh empty folder (the default snapshot path is ./snapshot.pt), and checks
// at the end that parsing left nothing behind there.
class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmp[] = "/tmp/ddpw-options-XXXXXX";
    ASSERT_NE(::mkdtemp(tmp), nullptr);
    dir_ = tmp;
    ASSERT_NE(::getcwd(old_cwd_, sizeof old_cwd_), nullptr);
    ASSERT_EQ(::chdir(dir_.c_str()), 0);
  }
  void TearDown() override {
    EXPECT_EQ(::chdir(old_cwd_), 0);
    EXPECT_EQ(::rmdir(dir_.c_str()), 0) << "parse_options left a file in " << dir_;
    if (::testing::Test::HasFailure()) ddp::remove_tree(dir_);
  }
  std::string dir_;
  char old_cwd_[4096] = {0};
};

TEST_F(OptionsTest, PositionalEpochsAndSaveEvery) {
  const auto o = parse({"50", "10"});
  EXPECT_EQ(o.total_epochs, 50);
  EXPECT_EQ(o.save_every, 10);
}

// A restart (torchrun --max-restarts, a Slurm requeue) runs the same command line: --fresh must
// not throw away the progress the restart exists to keep.
TEST_F(OptionsTest, FreshCountsOnlyOnTheFirstAttempt) {
  EXPECT_TRUE(parse({"5", "1", "--fresh"}).fresh);
  for (const char* restarts : {"TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"}) {
    ::setenv(restarts, "0", 1);
    EXPECT_TRUE(parse({"5", "1", "--fresh"}).fresh) << restarts << "=0";
    ::setenv(restarts, "1", 1);
    EXPECT_FALSE(parse({"5", "1", "--fresh"}).fresh) << restarts << "=1";
    ::unsetenv(restarts);
  }
}

// The library's hints name its own settings; once a program has parsed its command line they name
// the flags its learners type.
TEST_F(OptionsTest, TheLibrarysHintsNameTheFlags) {
  parse({"5", "1"}, ddpw::kTrainingOptions | ddpw::kDistributedOptions);
  EXPECT_EQ(ddp::thread_choice(3, 1).why, "--threads");
  EXPECT_EQ(ddp::setting_name(ddp::Setting::kCollectiveTimeout), "--collective-timeout");
  ddp::LaunchEnv bad_port;
  bad_port.master_port = 70000;
  try {
    ddp::validate_launch_env(bad_port);
    ADD_FAILURE() << "port 70000 was accepted";
  } catch (const ddp::Error& e) {
    EXPECT_EQ(e.hint(), "choose a port in 1024-65535 with --master-port or MASTER_PORT");
  }
}

TEST_F(OptionsTest, Defaults) {
  const auto o = parse({"5", "1"});
  EXPECT_EQ(o.batch_size, 32);
  EXPECT_EQ(o.device, "auto");
  EXPECT_EQ(o.dataset, "synthetic");
  EXPECT_EQ(o.lr, 0.0);  // the workload's own default
  EXPECT_EQ(o.test_batch_size, 1000);
  EXPECT_EQ(o.seed, 0u);
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.snapshot_path, "snapshot.pt");
  EXPECT_FALSE(o.fresh);
  EXPECT_TRUE(o.metrics_path.empty());
  EXPECT_EQ(o.master_port, 0);  // not a spawning program: from the launcher
}

TEST_F(OptionsTest, TheCnnDefaultsToTheSeedsBatchOf64) {
  EXPECT_EQ(parse({"5", "1", "--dataset", "synthetic"}).batch_size, 32);
  EXPECT_EQ(parse({"5", "1", "--dataset", "mnist"}).batch_size, 64);
  EXPECT_EQ(parse({"5", "1", "--dataset", "fashion-mnist"}).batch_size, ddpw::kCnnBatchSize);
}

// --model and --dataset: each from the other; a pair that cannot train is refused naming the fix.
TEST_F(OptionsTest, TheModelFollowsTheDatasetAndTheGptItsText) {
  EXPECT_EQ(parse({"5", "1"}).model, "linear");
  EXPECT_EQ(parse({"5", "1", "--dataset", "mnist"}).model, "cnn");
  const auto gpt = parse({"5", "1", "--model", "gpt"});
  EXPECT_EQ(gpt.dataset, "fortunes");
  EXPECT_EQ(gpt.batch_size, 32);
  EXPECT_EQ(gpt.gpt_size, "tiny");
  EXPECT_EQ(parse({"5", "1", "--dataset", "fortunes", "--gpt-size", "small"}).model, "gpt");
  EXPECT_EXIT(parse({"5", "1", "--model", "gpt", "--dataset", "mnist"}), ExitedWithCode(2),
              "--model gpt does not train on --dataset mnist \\(fix: give --dataset fortunes \\(a text\\), or leave "
              "--dataset out\\)");
  EXPECT_EXIT(parse({"5", "1", "--model", "cnn"}), ExitedWithCode(2),
              "--model cnn does not train on --dataset synthetic");
  EXPECT_EXIT(parse({"5", "1", "--gpt-size", "huge"}), ExitedWithCode(2), "--gpt-size: huge not in");
}

// Step 6's options: only where offered; --accumulate must cut the batch into equal micro-batches.
TEST_F(OptionsTest, FsdpOptionsAndAccumulation) {
  const auto o = parse({"5", "1", "--accumulate", "4", "--checkpoint-activations", "--reshard-after-forward", "false"},
                       ddpw::kTrainingOptions | ddpw::kFsdpOptions);
  EXPECT_TRUE(o.fully_sharded);
  EXPECT_EQ(o.accumulate, 4);
  EXPECT_TRUE(o.checkpoint_activations);
  EXPECT_FALSE(o.reshard_after_forward);
  EXPECT_TRUE(parse({"5", "1"}, ddpw::kTrainingOptions | ddpw::kFsdpOptions).reshard_after_forward);
  EXPECT_EXIT(parse({"5", "1", "--accumulate", "3"}, ddpw::kTrainingOptions | ddpw::kFsdpOptions), ExitedWithCode(2),
              "--accumulate 3 does not divide --batch-size 32 into equal micro-batches");
  EXPECT_EXIT(parse({"5", "1", "--accumulate", "2"}), ExitedWithCode(2), "are FSDP's: run step6_fully_sharded");
}

// --steps (short runs) and --sample-temperature (the GPT's sample) are training options: every step has them.
TEST_F(OptionsTest, StepsPerEpochAndTheSamplesTemperature) {
  const auto defaults = parse({"5", "1"});
  EXPECT_EQ(defaults.steps, 0);
  EXPECT_EQ(defaults.sample_temperature, 0.0);
  const auto o = parse({"5", "1", "--steps", "2", "--sample-temperature", "0.8"});
  EXPECT_EQ(o.steps, 2);
  EXPECT_EQ(o.sample_temperature, 0.8);
  EXPECT_EXIT(parse({"5", "1", "--steps", "-1"}), ExitedWithCode(2),
              "--steps: -1 is out of range \\(fix: give --steps a whole number from 0 to");
  EXPECT_EXIT(parse({"5", "1", "--sample-temperature", "-0.5"}), ExitedWithCode(2),
              "--sample-temperature: -0.5 is out");
}

TEST_F(OptionsTest, AnExplicitBatchSizeWins) {
  EXPECT_EQ(parse({"5", "1", "--dataset", "mnist", "--batch-size", "32"}).batch_size, 32);
  EXPECT_EQ(parse({"5", "1", "--batch-size", "64", "--dataset", "fashion-mnist"}).batch_size, 64);
  EXPECT_EQ(parse({"5", "1", "--dataset", "mnist", "--batch_size", "7"}).batch_size, 7);  // the alias
  EXPECT_EQ(parse({"5", "1", "--batch-size", "64"}).batch_size, 64);
}

TEST_F(OptionsTest, ValuesAtTheEdgesOfTheirRanges) {
  const auto o = parse({"1", "1000000", "--batch-size", "1048576", "--threads", "1024", "--gamma", "1", "--lr", "0",
                        "--seed", "18446744073709551615"});
  EXPECT_EQ(o.total_epochs, 1);
  EXPECT_EQ(o.save_every, 1000000);
  EXPECT_EQ(o.batch_size, 1 << 20);
  EXPECT_EQ(o.threads, 1024);
  EXPECT_EQ(o.gamma, 1.0);
  EXPECT_EQ(o.seed, 18446744073709551615ull);
}

TEST_F(OptionsTest, OutOfRangeNamesTheOptionAndTheRange) {
  EXPECT_EXIT(
      parse({"0", "1"}), ExitedWithCode(2),
      "prog: error: total_epochs: 0 is out of range \\(fix: give total_epochs a whole number from 1 to 1000000\\)");
  EXPECT_EXIT(parse({"5", "1000001"}), ExitedWithCode(2), "save_every: 1000001 is out of range");
  EXPECT_EXIT(parse({"5", "1", "--batch-size", "0"}), ExitedWithCode(2),
              "--batch-size: 0 is out of range \\(fix: give --batch-size a whole number from 1 to 1048576\\)");
  EXPECT_EXIT(parse({"5", "1", "--batch-size", "99999999999"}), ExitedWithCode(2), "--batch-size: 99999999999 is out");
  EXPECT_EXIT(parse({"5", "1", "--threads", "-1"}), ExitedWithCode(2), "--threads: -1 is out of range");
  EXPECT_EXIT(parse({"5", "1", "--seed", "-3"}), ExitedWithCode(2),
              "--seed: -3 is out of range \\(fix: give --seed a whole number of 0 or more\\)");
  EXPECT_EXIT(parse({"5", "1", "--gamma", "2"}), ExitedWithCode(2),
              "--gamma: 2 is out of range \\(fix: give --gamma a number from 0 to 1\\)");
}

TEST_F(OptionsTest, ANonNumberSaysAWholeNumberIsExpected) {
  EXPECT_EXIT(
      parse({"abc", "10"}), ExitedWithCode(2),
      "total_epochs: 'abc' is not a whole number \\(fix: give total_epochs a whole number from 1 to 1000000\\)");
  EXPECT_EXIT(parse({"5.5", "10"}), ExitedWithCode(2), "total_epochs: '5.5' is not a whole number");
  EXPECT_EXIT(parse({"5", "1e3"}), ExitedWithCode(2), "save_every: '1e3' is not a whole number");
  EXPECT_EXIT(parse({"5", "1", "--batch-size", "x"}), ExitedWithCode(2), "--batch-size: 'x' is not a whole number");
  EXPECT_EXIT(parse({"5", "1", "--seed", "abc"}), ExitedWithCode(2), "--seed: 'abc' is not a whole number");
  EXPECT_EXIT(parse({"5", "1", "--lr", "fast"}), ExitedWithCode(2),
              "--lr: 'fast' is not a number \\(fix: give --lr a number from 0 to 1000000\\)");
}

TEST_F(OptionsTest, RealNumbersInTheirUsualForms) {
  EXPECT_EQ(parse({"5", "1", "--lr", "0.5"}).lr, 0.5);
  EXPECT_EQ(parse({"5", "1", "--lr", "1e-3"}).lr, 1e-3);
  EXPECT_EQ(parse({"5", "1", "--lr", ".25"}).lr, 0.25);
  EXPECT_EQ(parse({"5", "1", "--lr", "2"}).lr, 2.0);
}

TEST_F(OptionsTest, DeviceForms) {
  for (const char* device : {"auto", "cpu", "cuda", "cuda:0", "cuda:12"})
    EXPECT_EQ(parse({"5", "1", "--device", device}).device, device);
  for (const char* device : {"gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda0"})
    EXPECT_EXIT(parse({"5", "1", "--device", device}), ExitedWithCode(2),
                std::string("--device '") + device + "' is not a device \\(fix: use auto, cpu, cuda or cuda:N\\)")
        << device;
}

TEST_F(OptionsTest, UnknownDatasetAndMissingSaveEvery) {
  EXPECT_EXIT(parse({"5", "1", "--dataset", "cifar"}), ExitedWithCode(2), "--dataset: cifar not in \\{synthetic");
  EXPECT_EXIT(parse({"5"}), ExitedWithCode(2), "save_every is required");
}

// The cluster scripts pass their defaults first (--device cuda, --snapshot ...) and the user's
// arguments after them: the last value of an option wins.
TEST_F(OptionsTest, TheLastValueOfAnOptionWins) {
  const auto o = parse({"5", "1", "--device", "cuda", "--snapshot", "a.pt", "--device", "cpu", "--snapshot", "b.pt"});
  EXPECT_EQ(o.device, "cpu");
  EXPECT_EQ(o.snapshot_path, "b.pt");
}

// Upstream's fixed 12355 made two step-1 jobs on one node fail (one "port in use", the other's
// worker joining the first job's group): the default is a free port, bound and listening from the
// moment it is chosen, so no other process can take it before rank 0 serves on it.
TEST_F(OptionsTest, ASpawningProgramMeetsOnThisNodeAtAFreePortItHolds) {
  const unsigned step1 = ddpw::kTrainingOptions | ddpw::kDistributedOptions | ddpw::kSpawnOptions;
  const unsigned step2 = ddpw::kTrainingOptions | ddpw::kDistributedOptions;
  const int port = parse({"5", "1"}, step1).master_port;
  EXPECT_GT(port, 0);
  EXPECT_EQ(parse({"5", "1"}, step1).master_port, port);  // chosen once per process
  const int other = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(other, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << "nothing listens on " << port;
  ::close(other);
  EXPECT_EQ(parse({"5", "1", "--master-port", "29511"}, step1).master_port, 29511);
  // A worker that spawn() started meets at the port its parent chose.
  ::setenv("DDPW_SPAWN_RANK", "1", 1);
  ::setenv("DDPW_SPAWN_MASTER_PORT", "4242", 1);
  EXPECT_EQ(parse({"5", "1"}, step1).master_port, 4242);
  ::unsetenv("DDPW_SPAWN_RANK");
  ::unsetenv("DDPW_SPAWN_MASTER_PORT");
  EXPECT_EQ(parse({"5", "1"}, step1).nproc, 2);
  EXPECT_EQ(parse({"5", "1"}, step2).master_port, 0);
  EXPECT_EQ(parse({"5", "1", "--master-addr", "n1"}, step2).master_addr, "n1");
  // Its workers always meet at localhost: it offers no master address and no file rendezvous.
  EXPECT_EXIT(parse({"5", "1", "--master-addr", "n1"}, step1), ExitedWithCode(2), "not expected:.*--master-addr");
  EXPECT_EXIT(parse({"5", "1", "--init-method", "file:///tmp/x"}, step1), ExitedWithCode(2),
              "not expected:.*--init-method");
  EXPECT_EXIT(parse({"5", "1", "--master-port", "0"}, step1), ExitedWithCode(2), "--master-port: 0 is out of range");
  EXPECT_EXIT(parse({"5", "1", "--nproc", "0"}, step1), ExitedWithCode(2), "--nproc: 0 is out of range");
}

// --help goes to stdout; the death tests read stderr, so the help is sent there.
void help_to_stderr(unsigned groups) {
  ::dup2(2, 1);
  parse({"--help"}, groups);
}

TEST_F(OptionsTest, HelpStatesEachStepsDefaults) {
  const unsigned step1 = ddpw::kTrainingOptions | ddpw::kDistributedOptions | ddpw::kSpawnOptions;
  const unsigned step2 = ddpw::kTrainingOptions | ddpw::kDistributedOptions;
  EXPECT_EXIT(help_to_stderr(step1), ExitedWithCode(0), "--master-port INT:INT in \\[1 - 65535\\][^=]");  // no "=0"
  EXPECT_EXIT(help_to_stderr(step1), ExitedWithCode(0),
              "Rendezvous port on this node \\(default: a free port, chosen at start\\)");
  EXPECT_EXIT(help_to_stderr(step2), ExitedWithCode(0), "Rendezvous port \\(default: from the launcher\\)");
  EXPECT_EXIT(help_to_stderr(step2), ExitedWithCode(0),
              "Samples per step on each rank \\(default: 32 synthetic, 64 mnist/fashion-mnist\\)");
}

TEST_F(OptionsTest, UnwritableSnapshotOrMetricsStopsBeforeTraining) {
  // /proc accepts access(W_OK) for root, but nothing can be created there.
  EXPECT_EXIT(parse({"5", "1", "--snapshot", "/proc/s.pt"}), ExitedWithCode(2),
              "--snapshot '/proc/s.pt': cannot create a file in folder '/proc' .*\\(fix: choose a path in a folder "
              "you can write with --snapshot\\)");
  EXPECT_EXIT(parse({"5", "1", "--metrics", "/proc/m.csv"}), ExitedWithCode(2),
              "--metrics '/proc/m.csv': cannot create a file in folder '/proc'");
  EXPECT_EXIT(parse({"5", "1", "--snapshot", "no-such-folder/s.pt"}), ExitedWithCode(2),
              "folder 'no-such-folder' does not exist \\(fix: create it \\(mkdir -p no-such-folder\\)");
  EXPECT_EXIT(parse({"5", "1", "--snapshot", "/tmp"}), ExitedWithCode(2), "--snapshot '/tmp' is a folder, not a file");
}

TEST_F(OptionsTest, TheWritabilityProbeLeavesFilesAsTheyWere) {
  { std::ofstream("m.csv") << "epoch\n0\n"; }
  const auto o = parse({"5", "1", "--snapshot", "sub.pt", "--metrics", "m.csv"});
  EXPECT_EQ(o.metrics_path, "m.csv");
  EXPECT_FALSE(ddp::path_exists("sub.pt")) << "the probe must not create the snapshot";
  std::stringstream kept;
  kept << std::ifstream("m.csv").rdbuf();
  EXPECT_EQ(kept.str(), "epoch\n0\n") << "an existing metrics file must not be truncated";
  EXPECT_EQ(::unlink("m.csv"), 0);
}

// Parses as an ordinary user: root may write any file, so a read-only one would not stop it.
void parse_as_nobody(const std::vector<std::string>& args) {
  if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) std::exit(99);
  parse(args);
}

TEST_F(OptionsTest, AnExistingMetricsFileThatCannotBeWrittenIsRefused) {
  ASSERT_EQ(::mkdir("m.csv", 0700), 0);  // a folder in place of the file
  EXPECT_EXIT(parse({"5", "1", "--metrics", "m.csv"}), ExitedWithCode(2), "--metrics 'm.csv' is a folder");
  EXPECT_EQ(::rmdir("m.csv"), 0);

  { std::ofstream("ro.csv") << "x\n"; }
  ASSERT_EQ(::chmod("ro.csv", 0444), 0);
  ASSERT_EQ(::chmod(".", 0777), 0);  // the folder stays writable for that user: only the file is not
  EXPECT_EXIT(parse_as_nobody({"5", "1", "--snapshot", "s.pt", "--metrics", "ro.csv"}), ExitedWithCode(2),
              "--metrics 'ro.csv' cannot be written .*\\(fix: make it writable \\(chmod u\\+w ro.csv\\)");
  EXPECT_EQ(::unlink("ro.csv"), 0);
}

// ZeRO's options (kZeroOptions, step 4): the stage, and what of a DeepSpeed config applies at parse
// time (the batch per rank, steps_per_print, the clipping the program reads). One process here.
class ZeroOptionsTest : public OptionsTest {
 protected:
  void SetUp() override {
    OptionsTest::SetUp();
    config_ = dir_ + ".ds_config.json";  // beside the folder: TearDown wants the folder empty
    std::ofstream(config_) << R"({"train_batch_size": 40, "steps_per_print": 7, "gradient_clipping": 1.0,
      "optimizer": {"type": "Adam", "params": {"lr": 0.002}}, "zero_optimization": {"stage": 1}})";
  }
  void TearDown() override {
    std::remove(config_.c_str());
    OptionsTest::TearDown();
  }
  static ddpw::Options parse_zero(std::vector<std::string> args, const std::string& kind = "solution",
                                  unsigned groups = ddpw::kTrainingOptions | ddpw::kDistributedOptions |
                                                    ddpw::kZeroOptions) {
    args.insert(args.begin(), "step4_sharded");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    ddpw::ProgramId program;
    program.name = "step4_sharded";
    program.kind = kind;
    program.step = 4;
    return ddpw::parse_options(static_cast<int>(argv.size()), argv.data(), "options test", groups, program);
  }
  std::string config_;
};

TEST_F(ZeroOptionsTest, StageFromTheFlagElseTheConfigElseTwo) {
  EXPECT_EQ(parse_zero({"5", "1"}).zero_stage, 2);
  EXPECT_EQ(parse_zero({"5", "1", "--zero", "1"}).zero_stage, 1);
  const auto o = parse_zero({"5", "1", "--deepspeed-config", config_});
  EXPECT_EQ(o.zero_stage, 1);  // the config's zero_optimization.stage
  EXPECT_EQ(o.strategy, "zero1");
  EXPECT_EQ(parse_zero({"5", "1", "--deepspeed_config", config_, "--zero", "2"}).zero_stage, 2);  // the flag wins
  EXPECT_EXIT(parse_zero({"5", "1", "--zero", "3"}), ExitedWithCode(2), "--zero: 3 is out of range");
}

TEST_F(ZeroOptionsTest, TheConfigSetsTheBatchThePrintIntervalAndTheClipping) {
  const auto o = parse_zero({"5", "1", "--deepspeed-config", config_});
  EXPECT_EQ(o.batch_size, 40);  // train_batch_size over 1 rank
  EXPECT_EQ(o.log_every, 7);
  EXPECT_DOUBLE_EQ(o.deepspeed.gradient_clipping, 1.0);
  EXPECT_EQ(parse_zero({"5", "1", "--deepspeed-config", config_, "--log-every", "3"}).log_every, 3);
  EXPECT_EXIT(parse_zero({"5", "1", "--deepspeed-config", config_, "--batch-size", "8"}), ExitedWithCode(2),
              "the batch size is given twice: --batch-size 8 and .*ds_config.json's batch keys \\(fix: leave out "
              "--batch-size");
  EXPECT_EXIT(parse_zero({"5", "1", "--deepspeed-config", dir_ + "/missing.json"}), ExitedWithCode(2), "missing.json");
}

// The exercise as shipped does not offer them: the step 4 command line names the TODO to complete.
TEST_F(ZeroOptionsTest, TheExerciseNamesItsTodo) {
  const unsigned step3_groups = ddpw::kTrainingOptions | ddpw::kDistributedOptions;
  EXPECT_EXIT(
      parse_zero({"5", "1", "--zero", "2"}, "exercise", step3_groups), ExitedWithCode(2),
      "fix: complete TODO\\(step4\\) in step4_sharded/main.cpp: offer the ZeRO options \\(ddpw::kZeroOptions\\)");
  EXPECT_EXIT(parse_zero({"5", "1", "--deepspeed-config", config_}, "solution", step3_groups), ExitedWithCode(2),
              "--zero and --deepspeed-config are ZeRO's: run step4_sharded");
}

// Step 5's exercise under its page's commands: whatever the parser makes of Lightning's options
// (`--epochs 50 --strategy ddp`: "save_every: 'ddp' is not a whole number"), the error names them and
// the TODO that adds them, not the positional they landed in.
TEST(ExerciseOptions, Step5NamesTheOptionsItsTodoAdds) {
  auto parse5 = [](std::vector<std::string> args) {
    args.insert(args.begin(), "step5_trainer");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    ddpw::ProgramId program;
    program.name = "step5_trainer";
    program.kind = "exercise";
    program.step = 5;
    return ddpw::parse_options(static_cast<int>(argv.size()), argv.data(), "options test", ddpw::kTrainingOptions,
                               program);
  };
  const std::string fix = "\\(fix: complete TODO\\(step5\\) in step5_trainer/main.cpp: offer Lightning's options";
  EXPECT_EXIT(parse5({"--epochs", "50", "--strategy", "ddp", "--rendezvous-timeout", "60"}), ExitedWithCode(2),
              "error: --epochs, --strategy are not options of step5_trainer yet \\(the parser read: save_every: "
              "'ddp' is not a whole number\\) " +
                  fix);
  EXPECT_EXIT(parse5({"--epochs", "50", "--gpus", "2", "--strategy", "zero2", "--fresh"}), ExitedWithCode(2),
              "error: --epochs, --gpus, --strategy are not options of step5_trainer yet .*" + fix);
  EXPECT_EXIT(parse5({"50", "10", "--rendezvous-timeout", "60"}), ExitedWithCode(2),
              "The following arguments were not expected: 60 --rendezvous-timeout \\(fix: see step5_trainer --help");
}

// --precision on every program; a DeepSpeed config's bf16/fp16 choose it when the flag does not,
// and the two disagreeing is an error naming both.
TEST_F(OptionsTest, PrecisionIsFp32UnlessAsked) {
  EXPECT_EQ(parse({"5", "1"}).precision, "fp32");
  EXPECT_EQ(parse({"5", "1", "--precision", "bf16"}).precision, "bf16");
  EXPECT_EQ(parse({"5", "1", "--precision", "fp16"}).precision, "fp16");
  EXPECT_EXIT(parse({"5", "1", "--precision", "fp8"}), ExitedWithCode(2),
              "--precision: fp8 not in \\{fp32,bf16,fp16\\}");
  EXPECT_FALSE(parse({"5", "1"}, ddpw::kTrainingOptions | ddpw::kDistributedOptions).bf16_compress);
  EXPECT_TRUE(parse({"5", "1", "--bf16-compress"}, ddpw::kTrainingOptions | ddpw::kDistributedOptions).bf16_compress);
}

// --cuda-graph (ddp::CudaGraphStep) is the trainer's: off unless asked; other programs do not offer it.
TEST_F(OptionsTest, CudaGraphIsTheTrainersAndOffUnlessAsked) {
  const unsigned trainer = ddpw::kTrainingOptions | ddpw::kTrainerOptions;
  EXPECT_FALSE(parse({"--epochs", "1"}, trainer).cuda_graph);
  EXPECT_TRUE(parse({"--epochs", "1", "--cuda-graph"}, trainer).cuda_graph);
  EXPECT_EXIT(parse({"5", "1", "--cuda-graph"}), ExitedWithCode(2), "--cuda-graph");
}

// --check-collectives (ddp::ProcessGroupOptions::check_collectives): off unless asked.
TEST_F(OptionsTest, CheckCollectivesIsOffUnlessAsked) {
  const unsigned groups = ddpw::kTrainingOptions | ddpw::kDistributedOptions;
  EXPECT_FALSE(parse({"5", "1"}, groups).check_collectives);
  EXPECT_TRUE(parse({"5", "1", "--check-collectives"}, groups).check_collectives);
}

TEST_F(ZeroOptionsTest, TheConfigsBf16OrFp16ChoosesThePrecision) {
  const std::string bf16 = dir_ + ".bf16.json", fp16 = dir_ + ".fp16.json";
  std::ofstream(bf16) << R"({"train_batch_size": 8, "bf16": {"enabled": true}})";
  std::ofstream(fp16) << R"({"train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": 10}})";
  EXPECT_EQ(parse_zero({"5", "1", "--deepspeed-config", config_}).precision, "fp32");  // none in the config
  EXPECT_EQ(parse_zero({"5", "1", "--deepspeed-config", config_, "--precision", "bf16"}).precision, "bf16");
  EXPECT_EQ(parse_zero({"5", "1", "--deepspeed-config", bf16}).precision, "bf16");
  const auto o = parse_zero({"5", "1", "--deepspeed-config", fp16, "--precision", "fp16"});  // the same: fine
  EXPECT_EQ(o.precision, "fp16");
  EXPECT_EQ(o.deepspeed.fp16.initial_scale_power, 10);
  EXPECT_EXIT(parse_zero({"5", "1", "--deepspeed-config", fp16, "--precision", "bf16"}), ExitedWithCode(2),
              "the precision is given twice: --precision bf16 and .*fp16.json's fp16.enabled \\(fix: leave out "
              "--precision");
  std::remove(bf16.c_str());
  std::remove(fp16.c_str());
}

}  // namespace
