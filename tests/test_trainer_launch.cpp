// The trainer's processes (plan_trainer_launch): Lightning's --gpus/--nodes against what torchrun,
// mpirun or srun started; with no launcher, --gpus N > 1 starts N workers; bad combinations are
// errors that name the fix, decided before any process starts or waits.
#include <gtest/gtest.h>

#include <string>

#include "course/options.h"
#include "course/trainer_launch.h"
#include "ddp/error.h"
#include "ddp/launch_env.h"

namespace {

ddpw::Options trainer_options(const std::string& strategy, int gpus = 0, int nodes = 0) {
  ddpw::Options o;
  o.strategy = strategy;
  o.zero_stage = strategy.rfind("zero", 0) == 0 ? strategy.back() - '0' : 0;
  o.gpus = gpus;
  o.nodes = nodes;
  o.device = "cpu";
  o.program = {"step5_trainer", "solution", "", 5};
  return o;
}

// What a launcher started: `world` ranks, `per_node` on this node.
ddp::LaunchEnv launched(const std::string& launcher, int world, int per_node) {
  ddp::LaunchEnv l;
  l.launcher = launcher;
  l.world_size = world;
  l.local_world_size = per_node;
  return l;
}

// The error's message and hint, or "" when there was none.
std::string refusal(const ddpw::Options& o, const ddp::LaunchEnv& seen, int gpus_visible = 0) {
  try {
    ddpw::plan_trainer_launch(o, seen, gpus_visible);
  } catch (const ddp::Error& e) {
    return e.message() + " | fix: " + e.hint();
  }
  return "";
}

}  // namespace

TEST(TrainerLaunch, NoLauncherGpusStartsThatManyWorkers) {
  const ddp::LaunchEnv none = launched("none", 1, 1);
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("ddp", 2), none, 0).spawn_workers, 2);
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("zero2", 3), none, 0).spawn_workers, 3);
  // One process: nothing to start, whatever the strategy.
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("single"), none, 0).spawn_workers, 0);
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("ddp", 1), none, 0).spawn_workers, 0);
  // One srun task may start workers, as step 1's batch scripts do.
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("ddp", 2), launched("slurm", 1, 1), 0).spawn_workers, 2);
}

TEST(TrainerLaunch, UnderALauncherGpusAndNodesOnlyCheck) {
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("ddp", 2, 2), launched("slurm", 4, 2), 0).spawn_workers, 0);
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("zero1"), launched("torchrun", 2, 2), 0).spawn_workers, 0);
  EXPECT_EQ(ddpw::plan_trainer_launch(trainer_options("ddp", 2), launched("openmpi", 2, 2), 0).spawn_workers, 0);
}

TEST(TrainerLaunch, GpusOtherThanLaunchedNamesTheLaunchersFix) {
  EXPECT_NE(refusal(trainer_options("ddp", 3), launched("torchrun", 2, 2)).find("torchrun --nproc_per_node=3"),
            std::string::npos);
  EXPECT_NE(refusal(trainer_options("ddp", 4), launched("slurm", 4, 2)).find("#SBATCH --ntasks-per-node=4"),
            std::string::npos);
  EXPECT_NE(refusal(trainer_options("ddp", 1), launched("openmpi", 2, 2)).find("--gpus 1, but openmpi started 2"),
            std::string::npos);
}

TEST(TrainerLaunch, NodesOtherThanLaunchedOrWithoutALauncher) {
  EXPECT_NE(refusal(trainer_options("ddp", 0, 3), launched("slurm", 4, 2)).find("#SBATCH --nodes=3"),
            std::string::npos);
  EXPECT_NE(
      refusal(trainer_options("ddp", 0, 2), launched("none", 1, 1)).find("no launcher started processes on other"),
      std::string::npos);
}

TEST(TrainerLaunch, SingleIsOneProcess) {
  EXPECT_NE(
      refusal(trainer_options("single"), launched("torchrun", 2, 2)).find("--strategy single trains in one process"),
      std::string::npos);
  EXPECT_NE(refusal(trainer_options("single", 2), launched("none", 1, 1)).find("use --strategy ddp"),
            std::string::npos);
}

TEST(TrainerLaunch, MoreWorkersThanGpus) {
  ddpw::Options o = trainer_options("ddp", 4);
  o.device = "auto";
  EXPECT_NE(refusal(o, launched("none", 1, 1), 2).find("give --gpus 2 or fewer, or --device cpu"), std::string::npos);
  EXPECT_EQ(ddpw::plan_trainer_launch(o, launched("none", 1, 1), 4).spawn_workers, 4);
  o.device = "cpu";  // CPU workers: as many as asked
  EXPECT_EQ(ddpw::plan_trainer_launch(o, launched("none", 1, 1), 2).spawn_workers, 4);
}

TEST(TrainerLaunch, NoStrategyNamesTheExercisesTodo) {
  ddpw::Options o = trainer_options("");
  o.program = {"step5_trainer", "exercise", "", 5};
  EXPECT_NE(refusal(o, launched("none", 1, 1)).find("complete TODO(step5) in step5_trainer/main.cpp"),
            std::string::npos);
  o.program = {"my_program", "program", "", -1};
  EXPECT_NE(refusal(o, launched("none", 1, 1)).find("ddpw::kTrainerOptions"), std::string::npos);
}
