// "Who am I": the launch-environment table for torchrun, OpenMPI, Slurm, mixtures and bad input.
#include <gtest/gtest.h>

#include "ddp/error.h"
#include "ddp/launch_env.h"

using ddp::EnvMap;
using ddp::resolve_launch_env;

TEST(LaunchEnv, NothingSetIsOneProcess) {
  const auto l = resolve_launch_env({});
  EXPECT_EQ(l.launcher, "none");
  EXPECT_EQ(l.global_rank, 0);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_TRUE(l.warning.empty());
}

TEST(LaunchEnv, Torchrun) {
  const EnvMap env{{"RANK", "3"},           {"LOCAL_RANK", "1"},  {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "1"},     {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29400"}};
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
  const EnvMap env{{"OMPI_COMM_WORLD_RANK", "2"},       {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"PMIX_RANK", "2"},                  {"MASTER_ADDR", "d-1"},
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
  const EnvMap env{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.master_addr, "127.0.0.1");
}

TEST(LaunchEnv, OpenMpiAcrossNodesNeedsMaster) {
  const EnvMap env{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_THROW(resolve_launch_env(env), ddp::Error);
}

TEST(LaunchEnv, MpirunInsideSlurmIgnoresMisleadingSlurmVariables) {
  // mpirun inside an allocation: the ranks inherit SLURM_PROCID=0 / SLURM_NTASKS=1 of a helper step.
  const EnvMap env{{"SLURM_PROCID", "0"},         {"SLURM_NTASKS", "1"},          {"SLURM_STEP_ID", "0"},
                   {"SLURM_JOB_NODELIST", "n[1-2]"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"MASTER_ADDR", "n1"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.global_rank, 3);
  EXPECT_EQ(l.world_size, 4);
}

TEST(LaunchEnv, SlurmStepWithNtasks) {
  const EnvMap env{{"SLURM_PROCID", "3"},   {"SLURM_LOCALID", "1"},          {"SLURM_NODEID", "1"},
                   {"SLURM_NTASKS", "4"},   {"SLURM_TASKS_PER_NODE", "2(x2)"}, {"SLURM_STEP_ID", "0"},
                   {"SLURM_JOB_ID", "1234"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.launcher, "slurm");
  EXPECT_EQ(l.global_rank, 3);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_world_size, 2);
  EXPECT_EQ(l.master_addr, "gpu07");           // the first node of the job
  EXPECT_EQ(l.master_port, 20000 + 1234 % 20000);  // per job: jobs sharing a node differ
}

TEST(LaunchEnv, SlurmWithOnlyTasksPerNode) {
  // --ntasks-per-node without --ntasks: SLURM_NTASKS may be absent.
  const EnvMap env{{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"}, {"SLURM_NNODES", "3"},
                   {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "a[1-3]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.world_size, 6);
  EXPECT_EQ(l.local_world_size, 2);
}

TEST(LaunchEnv, SlurmUnevenTasksPerNode) {
  // -N2 -n3: SLURM_TASKS_PER_NODE=2,1; the task on the second node is alone there.
  const EnvMap env{{"SLURM_PROCID", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"},
                   {"SLURM_TASKS_PER_NODE", "2,1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "a[1-2]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.world_size, 3);
  EXPECT_EQ(l.local_world_size, 1);
}

TEST(LaunchEnv, SlurmRepeatedTasksPerNodeOnTheLastNode) {
  // -N4 -n7: SLURM_TASKS_PER_NODE=2(x3),1; the one task on the fourth node is alone there.
  const EnvMap env{{"SLURM_PROCID", "6"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "3"},
                   {"SLURM_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n[1-4]"}};
  const auto l = resolve_launch_env(env);
  EXPECT_EQ(l.world_size, 7);
  EXPECT_EQ(l.local_world_size, 1);
  EXPECT_EQ(l.node_rank, 3);
  EXPECT_EQ(l.master_addr, "n1");
}

TEST(LaunchEnv, SlurmWithOnlyTheTaskCountSpreadsItOverTheNodes) {
  // Hand-made environments may carry SLURM_NTASKS alone: 4 tasks on 2 nodes are 2 per node, not 4.
  const EnvMap env{{"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"},
                   {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  EXPECT_EQ(resolve_launch_env(env).local_world_size, 2);
}

TEST(LaunchEnv, SrunWithPmixAgreesWithSlurm) {
  // srun --mpi=pmix sets PMIX_RANK and no OMPI_* variables: Slurm's values hold.
  const EnvMap env{{"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"},
                   {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "n1"}, {"PMIX_RANK", "1"}};
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
  const EnvMap env{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"},
                   {"SLURM_JOB_NODELIST", "a[1-2]"}, {"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"},
                   {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "a1"}, {"MASTER_PORT", "29500"}};
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
      {{"RANK", "2"}, {"WORLD_SIZE", "2"}},                                      // rank >= world size
      {{"RANK", "-1"}, {"WORLD_SIZE", "2"}},                                     // negative rank
      {{"RANK", "one"}, {"WORLD_SIZE", "2"}},                                    // not a number
      {{"RANK", "0"}, {"WORLD_SIZE", "2x"}},                                     // trailing junk
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}},            // not a port
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}},  // local rank too big
      {{"PMIX_RANK", "0"}},                                                      // no world size
      {{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}},                           // no task count
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"},      // two launchers disagree
       {"SLURM_JOB_NODELIST", "n1"}, {"PMIX_RANK", "1"}},
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"},      // a node list that is a typo
       {"SLURM_NNODES", "2"}, {"SLURM_JOB_NODELIST", "n[1-99999999999999999999]"}},
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
