// "Who am I": the launch-environment table for torchrun, OpenMPI, Slurm, mixtures and bad input;
// check_launch, which checks what a step program read against it; errors that name the rank.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include "course/check_launch.h"
#include "course/options.h"
#include "course/run_main.h"
#include "ddp/error.h"
#include "ddp/launch_env.h"

using ddp::EnvMap;
using ddp::resolve_launch_env;

// what() carries the fix: a program that prints what() (as most do) shows it; message() and hint()
// are the two parts.
TEST(Error, WhatCarriesTheFix) {
  const ddp::Error e("MASTER_PORT='x' is not a port", "set MASTER_PORT to 1024-65535");
  EXPECT_STREQ(e.what(), "MASTER_PORT='x' is not a port (fix: set MASTER_PORT to 1024-65535)");
  EXPECT_EQ(e.message(), "MASTER_PORT='x' is not a port");
  EXPECT_EQ(e.hint(), "set MASTER_PORT to 1024-65535");
  const ddp::Error no_fix("nothing to fix");
  EXPECT_STREQ(no_fix.what(), "nothing to fix");
  EXPECT_EQ(no_fix.message(), "nothing to fix");
  try {
    DDP_CHECK(false, "the check failed", "do this instead");
    ADD_FAILURE() << "DDP_CHECK(false, ...) did not throw";
  } catch (const std::exception& caught) {  // as a program catches it
    EXPECT_STREQ(caught.what(), "the check failed (fix: do this instead)");
  }
}

TEST(LaunchEnv, NothingSetIsOneProcess) {
  const auto l = resolve_launch_env({});
  EXPECT_EQ(l.launcher, "none");
  EXPECT_EQ(l.global_rank, 0);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_TRUE(l.warning.empty());
}

TEST(LaunchEnv, Torchrun) {
  const EnvMap env{{"RANK", "3"},       {"LOCAL_RANK", "1"},   {"WORLD_SIZE", "4"},     {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "1"}, {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29400"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "torchrun");
  EXPECT_EQ(l.global_rank, 3);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_world_size, 2);
  EXPECT_EQ(l.node_rank, 1);
  EXPECT_EQ(l.master_addr, "n1");
  EXPECT_EQ(l.master_port, 29400);
}

TEST(LaunchEnv, OpenMpi) {
  const EnvMap env{{"OMPI_COMM_WORLD_RANK", "2"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"PMIX_RANK", "2"},
                   {"MASTER_ADDR", "d-1"},
                   {"MASTER_PORT", "12340"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.global_rank, 2);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_world_size, 2);
  EXPECT_EQ(l.master_addr, "d-1");
}

TEST(LaunchEnv, OpenMpiOnOneNodeNeedsNoMaster) {
  const EnvMap env{{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.master_addr, "127.0.0.1");
}

TEST(LaunchEnv, OpenMpiAcrossNodesNeedsMaster) {
  const EnvMap env{{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_THROW(resolve_launch_env(env), ddp::Error);
}

TEST(LaunchEnv, MpirunInsideSlurmIgnoresMisleadingSlurmVariables) {
  // mpirun inside an allocation: the ranks inherit SLURM_PROCID=0 / SLURM_NTASKS=1 of a helper step.
  const EnvMap env{{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "1"},
                   {"SLURM_STEP_ID", "0"},
                   {"SLURM_JOB_NODELIST", "n[1-2]"},
                   {"OMPI_COMM_WORLD_RANK", "3"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"MASTER_ADDR", "n1"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.global_rank, 3);
  EXPECT_EQ(l.world_size, 4);
}

TEST(LaunchEnv, SlurmStepWithNtasks) {
  const EnvMap env{{"SLURM_PROCID", "3"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_NODEID", "1"},
                   {"SLURM_NTASKS", "4"},
                   {"SLURM_TASKS_PER_NODE", "2(x2)"},
                   {"SLURM_STEP_ID", "0"},
                   {"SLURM_JOB_ID", "1234"},
                   {"SLURM_JOB_NODELIST", "gpu[07-08]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "slurm");
  EXPECT_EQ(l.global_rank, 3);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_world_size, 2);
  EXPECT_EQ(l.master_addr, "gpu07");               // the first node of the job
  EXPECT_EQ(l.master_port, 20000 + 1234 % 20000);  // per job: jobs sharing a node differ
}

TEST(LaunchEnv, SlurmWithOnlyTasksPerNode) {
  // --ntasks-per-node without --ntasks: SLURM_NTASKS may be absent.
  const EnvMap env{{"SLURM_PROCID", "5"},           {"SLURM_LOCALID", "1"},         {"SLURM_NODEID", "2"},
                   {"SLURM_NNODES", "3"},           {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_STEP_ID", "0"},
                   {"SLURM_JOB_NODELIST", "a[1-3]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.world_size, 6);
  EXPECT_EQ(l.local_world_size, 2);
}

TEST(LaunchEnv, SlurmUnevenTasksPerNode) {
  // -N2 -n3: SLURM_TASKS_PER_NODE=2,1; the task on the second node is alone there.
  const EnvMap env{{"SLURM_PROCID", "2"},           {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"},
                   {"SLURM_TASKS_PER_NODE", "2,1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "a[1-2]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.world_size, 3);
  EXPECT_EQ(l.local_world_size, 1);
}

TEST(LaunchEnv, SlurmRepeatedTasksPerNodeOnTheLastNode) {
  // -N4 -n7: SLURM_TASKS_PER_NODE=2(x3),1; the one task on the fourth node is alone there.
  const EnvMap env{{"SLURM_PROCID", "6"},  {"SLURM_LOCALID", "0"},
                   {"SLURM_NODEID", "3"},  {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                   {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n[1-4]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.world_size, 7);
  EXPECT_EQ(l.local_world_size, 1);
  EXPECT_EQ(l.node_rank, 3);
  EXPECT_EQ(l.master_addr, "n1");
}

TEST(LaunchEnv, SlurmWithOnlyTheTaskCountSpreadsItOverTheNodes) {
  // Hand-made environments may carry SLURM_NTASKS alone: 4 tasks on 2 nodes are 2 per node, not 4.
  const EnvMap env{{"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "4"},
                   {"SLURM_NNODES", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  EXPECT_EQ(resolve_launch_env(env).local_world_size, 2);
}

TEST(LaunchEnv, SrunWithPmixAgreesWithSlurm) {
  // srun --mpi=pmix sets PMIX_RANK and no OMPI_* variables: Slurm's values hold.
  const EnvMap env{{"SLURM_PROCID", "1"},  {"SLURM_LOCALID", "1"},        {"SLURM_NTASKS", "2"},
                   {"SLURM_STEP_ID", "0"}, {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "n1"},
                   {"PMIX_RANK", "1"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "slurm");
  EXPECT_EQ(l.global_rank, 1);
  EXPECT_EQ(l.world_size, 2);
}

TEST(LaunchEnv, PmixWithOpenMpiSizeOutsideSlurm) {
  const EnvMap env{{"PMIX_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.global_rank, 1);
  EXPECT_EQ(l.world_size, 2);
}

// No fixed default port (two jobs sharing a node would meet at it): one process takes any free
// port (0), and an mpirun job without MASTER_PORT gets one from its own PMIx namespace.
TEST(LaunchEnv, NoFixedDefaultPort) {
  EXPECT_EQ(resolve_launch_env({}).master_port, 0);
  const EnvMap job_a{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_NAMESPACE", "1762721793"}};
  EnvMap job_b = job_a;
  job_b["PMIX_NAMESPACE"] = "1762787329";
  const int a = resolve_launch_env(job_a).master_port, b = resolve_launch_env(job_b).master_port;
  EXPECT_EQ(a, ddp::mpirun_port("1762721793"));
  EXPECT_NE(a, b);
  EXPECT_GE(a, 20000);
  EXPECT_LT(a, 32000);  // below the kernel's ports for outgoing connections (32768-60999)
  EnvMap given = job_a;
  given["MASTER_PORT"] = "23456";
  EXPECT_EQ(resolve_launch_env(given).master_port, 23456);
}

TEST(LaunchEnv, MasterAddrBeatsMasterAddress) {
  const EnvMap env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_ADDRESS", "b"}};
  EXPECT_EQ(resolve_launch_env(env).master_addr, "a");
}

TEST(LaunchEnv, BatchScriptWithoutSrunIsOneProcessWithAWarning) {
  const EnvMap env{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "a[1-2]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "none");
  EXPECT_EQ(l.world_size, 1);
  EXPECT_NE(l.warning.find("srun"), std::string::npos);
}

TEST(LaunchEnv, TorchrunInsideSlurmWins) {
  // srun torchrun ...: torchrun's variables describe the worker, Slurm's describe torchrun.
  const EnvMap env{
      {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},   {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "a[1-2]"},
      {"RANK", "5"},         {"LOCAL_RANK", "1"},     {"WORLD_SIZE", "8"},    {"LOCAL_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "a1"}, {"MASTER_PORT", "29500"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "torchrun");
  EXPECT_EQ(l.global_rank, 5);
}

TEST(LaunchEnv, MasterAddressAliasFromDelta) {
  const EnvMap env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDRESS", "gpub001"}};
  EXPECT_EQ(resolve_launch_env(env).master_addr, "gpub001");
}

TEST(LaunchEnv, OptionsBeatTheEnvironment) {
  ddp::LaunchOverrides o;
  o.global_rank = 1;
  o.world_size = 2;
  o.master_addr = "127.0.0.1";
  o.master_port = 12355;
  const EnvMap env{{"RANK", "7"}, {"WORLD_SIZE", "8"}, {"MASTER_PORT", "1"}};
  const auto l = resolve_launch_env(env, o);
  EXPECT_EQ(l.launcher, "options");
  EXPECT_EQ(l.global_rank, 1);
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.master_port, 12355);
}

TEST(LaunchEnv, InconsistentInputIsAClearError) {
  const std::vector<EnvMap> bad = {
      {{"RANK", "2"}, {"WORLD_SIZE", "2"}},                                                  // rank >= world size
      {{"RANK", "-1"}, {"WORLD_SIZE", "2"}},                                                 // negative rank
      {{"RANK", "one"}, {"WORLD_SIZE", "2"}},                                                // not a number
      {{"RANK", "0"}, {"WORLD_SIZE", "2x"}},                                                 // trailing junk
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}},                        // not a port
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}},  // local rank too big
      {{"PMIX_RANK", "0"}},                                                                  // no world size
      {{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}},                                       // no task count
      {{"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "2"},
       {"SLURM_STEP_ID", "0"},  // two launchers disagree
       {"SLURM_JOB_NODELIST", "n1"},
       {"PMIX_RANK", "1"}},
      {{"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "2"},
       {"SLURM_STEP_ID", "0"},  // a node list that is a typo
       {"SLURM_NNODES", "2"},
       {"SLURM_JOB_NODELIST", "n[1-99999999999999999999]"}},
  };
  for (const auto& env : bad) {
    try {
      resolve_launch_env(env);
      ADD_FAILURE() << "accepted: " << env.begin()->first << "=" << env.begin()->second;
    } catch (const ddp::Error& e) {
      EXPECT_FALSE(e.hint().empty()) << e.what();  // every error says how to fix it
    }
  }
}

// ---- check_launch: what a step program read from its launcher, checked against the library's view.

namespace {

// Sets variables for one test and removes them (and the error prefix) afterwards; the test
// process starts from a clean launcher environment.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const EnvMap& vars) : vars_(vars) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_PROCID",
                             "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NTASKS", "SLURM_JOB_ID", "DDPW_SPAWN_RANK"})
      ::unsetenv(name);
    for (const auto& [name, value] : vars_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : vars_) ::unsetenv(name.c_str());
    ddpw::set_error_prefix("");
  }

 private:
  EnvMap vars_;
};

ddpw::Options program(const std::string& name, const std::string& kind) {
  ddpw::Options o;
  o.program.name = name;
  o.program.kind = kind;
  o.program.step = name[4] - '0';
  return o;
}

std::string error_of(const ddpw::LaunchValues& me, const ddpw::Options& o) {
  try {
    ddpw::check_launch(me, o);
  } catch (const ddp::Error& e) {
    return e.message() + " (fix: " + e.hint() + ")";
  }
  return "no error";
}

}  // namespace

TEST(CheckLaunch, NothingReadAndNoLauncherIsOneProcess) {
  ScopedEnvironment env({});
  const auto l = ddpw::check_launch({}, program("step0_single_gpu", "program"));
  EXPECT_EQ(l.global_rank, 0);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_EQ(l.launcher, "none");
}

TEST(CheckLaunch, ValuesReadFromTorchrunAreCompleted) {
  ScopedEnvironment env({{"RANK", "1"},
                         {"WORLD_SIZE", "2"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "29411"}});
  ddpw::LaunchValues me;  // what step 2's solution reads
  me.global_rank = ddp::env_int("RANK");
  me.local_rank = ddp::env_int("LOCAL_RANK");
  me.world_size = ddp::env_int("WORLD_SIZE");
  me.master_addr = ddp::env("MASTER_ADDR");
  me.master_port = ddp::env_int("MASTER_PORT");
  const auto l = ddpw::check_launch(me, program("step2_env_launch", "solution"));
  EXPECT_EQ(l.launcher, "torchrun");
  EXPECT_EQ(l.global_rank, 1);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world_size, 2);  // not read: the launcher's
  EXPECT_EQ(l.master_port, 29411);
}

TEST(CheckLaunch, AWrongVariableIsNamed) {
  ScopedEnvironment env({{"RANK", "3"},
                         {"WORLD_SIZE", "4"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "n1"},
                         {"MASTER_PORT", "29411"}});
  ddpw::LaunchValues me;
  me.global_rank = 3;
  me.world_size = 4;
  me.local_rank = 3;  // the global rank by mistake: rank 3 would take GPU 3 of a 2-GPU node
  const std::string error = error_of(me, program("step2_env_launch", "exercise"));
  EXPECT_NE(error.find("read local rank 3, but torchrun says 1 (LOCAL_RANK)"), std::string::npos) << error;
  EXPECT_NE(error.find("fix: read local rank from LOCAL_RANK"), std::string::npos) << error;
}

TEST(CheckLaunch, AnExerciseThatReadsNothingUnderALauncherNamesItsTodo) {
  ScopedEnvironment env({{"SLURM_PROCID", "1"},
                         {"SLURM_STEP_ID", "0"},
                         {"SLURM_NTASKS", "2"},
                         {"SLURM_JOB_NODELIST", "n[1-2]"},
                         {"SLURM_JOB_ID", "77"}});
  const std::string error = error_of({}, program("step3_multinode_slurm", "exercise"));
  EXPECT_NE(error.find("slurm started step3_multinode_slurm (exercise) as rank 1 of 2, but the program read no rank"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("complete TODO(step3) in step3_multinode_slurm/main.cpp"), std::string::npos) << error;
}

TEST(CheckLaunch, StepTwoUnderSrunPointsToStepThree) {
  ScopedEnvironment env(
      {{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}});
  const std::string error = error_of({}, program("step2_env_launch", "solution"));
  EXPECT_NE(error.find("run step3_multinode_slurm under srun"), std::string::npos) << error;
}

TEST(CheckLaunch, TheBatchShellIsNotAnSrunTask) {
  // SLURM_PROCID=0 and SLURM_NTASKS=4 in the batch script itself: a program run there without
  // srun is one process, whatever the variables suggest; it must not wait for 3 others.
  ScopedEnvironment env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n[1-2]"}});
  ddpw::LaunchValues me;
  me.global_rank = 0;
  me.world_size = 4;
  const std::string error = error_of(me, program("step3_multinode_slurm", "solution"));
  EXPECT_NE(error.find("read world size 4, but no launcher started it as one of several ranks"), std::string::npos)
      << error;
  EXPECT_NE(error.find("Start the program with srun"), std::string::npos) << error;
}

TEST(CheckLaunch, ASpawnedWorkerKeepsTheRankItWasGiven) {
  // Step 1 inside a one-task srun step: the parent's SLURM_* say nothing about the workers.
  ScopedEnvironment env({{"DDPW_SPAWN_RANK", "1"},
                         {"SLURM_PROCID", "0"},
                         {"SLURM_STEP_ID", "0"},
                         {"SLURM_NTASKS", "1"},
                         {"SLURM_JOB_NODELIST", "n1"}});
  ddpw::LaunchValues me;
  me.global_rank = me.local_rank = 1;
  me.world_size = me.local_world_size = 2;
  me.master_addr = "localhost";
  auto o = program("step1_multigpu_fork", "solution");
  o.master_port = 12355;
  const auto l = ddpw::check_launch(me, o);
  EXPECT_EQ(l.launcher, "options");
  EXPECT_EQ(l.global_rank, 1);
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.master_addr, "localhost");
  EXPECT_EQ(l.master_port, 12355);
}

TEST(CheckLaunch, ErrorsAfterItNameTheRankAndHost) {
  ScopedEnvironment env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29411"}});
  ddpw::LaunchValues me;
  me.global_rank = 1;
  me.world_size = 2;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  ::testing::internal::CaptureStderr();
  const int rc = ddpw::run_main([&] {
    ddpw::check_launch(me, program("step2_env_launch", "solution"));
    throw ddp::Error("snapshot 's.pt' is corrupt", "use --fresh");
    return 0;
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, ddp::kExitError);
  EXPECT_EQ(err, "[rank 1 @ " + std::string(host) + "] error: snapshot 's.pt' is corrupt (fix: use --fresh)\n");
}

TEST(LaunchEnvHelpers, EnvAndEnvInt) {
  ScopedEnvironment env({{"RANK", "12"}, {"WORLD_SIZE", "x1"}, {"MASTER_ADDR", ""}});
  EXPECT_EQ(ddp::env_int("RANK"), 12);
  EXPECT_EQ(ddp::env("MASTER_ADDR"), std::nullopt);  // empty counts as unset
  EXPECT_EQ(ddp::env_int("LOCAL_RANK"), std::nullopt);
  try {
    ddp::env_int("WORLD_SIZE");
    ADD_FAILURE() << "accepted WORLD_SIZE=x1";
  } catch (const ddp::Error& e) {
    EXPECT_EQ(e.message(), "WORLD_SIZE='x1' is not a whole number");
  }
}

TEST(LaunchEnvHelpers, JobPortIsTheJobIdRule) {
  EXPECT_EQ(ddp::job_port(12345), 32345);  // 20000 + 12345 % 20000
  EXPECT_EQ(ddp::job_port(40001), 20001);
}
