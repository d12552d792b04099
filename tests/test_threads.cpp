// Threads per rank (ddp/threads.h): the pure rule with a given affinity mask, machine and
// environment — the cases the course meets: step 1's workers sharing one Slurm task, srun tasks
// with their own CPUs, an mpirun rank bound to one core, OMP_NUM_THREADS, torchrun's workers —
// and the real mask of this process (sched_getaffinity), changed with sched_setaffinity as
// taskset does.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include "ddp/setting_names.h"  // defines: setting_name, setting_value
#include "ddp/threads.h"

namespace {

ddp::CpuFacts facts(int mask, int online, bool workers_share_task) {
  ddp::CpuFacts f;
  f.mask_cpus = mask;
  f.online_cpus = online;
  f.workers_share_task = workers_share_task;
  return f;
}

TEST(Threads, AnExplicitRequestIsUsedAsGiven) {
  const auto c = ddp::thread_choice(3, 2, facts(1, 64, true), {{"SLURM_CPUS_PER_TASK", "1"}});
  EXPECT_EQ(c.count, 3);
  EXPECT_EQ(c.why, ddp::setting_name(ddp::Setting::kThreads));  // the library's name, or the program's
}

// Measured on main: step 1 under --cpus-per-task=16 ran 2 x 16 threads on 16 CPUs.
TEST(Threads, Step1WorkersDivideTheirTasksCpus) {
  // Slurm bound the task to 16 CPUs of a 64-CPU node (cgroup or task/affinity).
  auto c = ddp::thread_choice(0, 2, facts(16, 64, true), {{"SLURM_CPUS_PER_TASK", "16"}});
  EXPECT_EQ(c.count, 8);
  EXPECT_EQ(c.why, "16 CPUs in the affinity mask / 2 workers");
  // Nothing bound it (the mask is the whole node): Slurm's count for the task still holds.
  c = ddp::thread_choice(0, 2, facts(64, 64, true), {{"SLURM_CPUS_PER_TASK", "16"}});
  EXPECT_EQ(c.count, 8);
  EXPECT_EQ(c.why, "SLURM_CPUS_PER_TASK=16 / 2 workers");
  // torchrun's workers share the one task that started torchrun in the same way.
  EXPECT_EQ(ddp::thread_choice(0, 4, facts(40, 80, true), {{"SLURM_CPUS_PER_TASK", "40"}}).count, 10);
}

TEST(Threads, SrunTasksEachHaveTheirOwnCpus) {
  // srun -n 2 -c 8 with task binding: each task's mask is its own 8 CPUs.
  auto c = ddp::thread_choice(0, 2, facts(8, 16, false), {{"SLURM_CPUS_PER_TASK", "8"}});
  EXPECT_EQ(c.count, 8);
  // Without binding every task sees the whole node: the node is shared, Slurm's count caps it.
  c = ddp::thread_choice(0, 2, facts(16, 16, false), {{"SLURM_CPUS_PER_TASK", "8"}});
  EXPECT_EQ(c.count, 8);
  // ... and a node that has fewer CPUs than Slurm believes (the local test cluster's 2 cores).
  c = ddp::thread_choice(0, 2, facts(2, 2, false), {{"SLURM_CPUS_PER_TASK", "8"}});
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.why, "2 CPUs in the affinity mask / 2 ranks");
}

// Measured on main: SuperCloud's mpirun gave 20 threads to a rank bound to one core.
TEST(Threads, ARankBoundToOneCoreGetsOneThread) {
  const auto c = ddp::thread_choice(0, 2, facts(1, 40, false), {});
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.why, "1 CPU in the affinity mask");
}

TEST(Threads, OmpNumThreadsIsHonouredUpToTheBudget) {
  auto c = ddp::thread_choice(0, 1, facts(16, 16, false), {{"OMP_NUM_THREADS", "4"}});
  EXPECT_EQ(c.count, 4);
  EXPECT_EQ(c.why, "OMP_NUM_THREADS");
  c = ddp::thread_choice(0, 2, facts(16, 64, true), {{"OMP_NUM_THREADS", "16"}});
  EXPECT_EQ(c.count, 8);
  EXPECT_EQ(c.why, "OMP_NUM_THREADS=16, capped: 16 CPUs in the affinity mask / 2 workers");
  // Not a number, zero: as if unset.
  EXPECT_EQ(ddp::thread_choice(0, 1, facts(6, 6, false), {{"OMP_NUM_THREADS", "x"}}).count, 6);
  EXPECT_EQ(ddp::thread_choice(0, 1, facts(6, 6, false), {{"OMP_NUM_THREADS", "0"}}).count, 6);
}

TEST(Threads, NeverFewerThanOne) {
  EXPECT_EQ(ddp::thread_choice(0, 8, facts(2, 2, true), {}).count, 1);
  EXPECT_EQ(ddp::thread_choice(0, 8, facts(4, 4, true), {{"SLURM_CPUS_PER_TASK", "2"}}).count, 1);
}

// The real mask, as `taskset -c 0` sets it: the count follows it (the parent's mask is restored).
TEST(Threads, FollowsThisProcesssAffinityMask) {
  cpu_set_t before;
  ASSERT_EQ(::sched_getaffinity(0, sizeof before, &before), 0);
  EXPECT_EQ(ddp::affinity_cpus(), CPU_COUNT(&before));
  int first = 0;
  while (!CPU_ISSET(first, &before)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  const int cpus = ddp::affinity_cpus();
  ::unsetenv("OMP_NUM_THREADS");
  ::unsetenv("SLURM_CPUS_PER_TASK");
  const auto c = ddp::thread_choice(0, 1);
  ASSERT_EQ(::sched_setaffinity(0, sizeof before, &before), 0);
  EXPECT_EQ(cpus, 1);
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.why, "1 CPU in the affinity mask");
}

}  // namespace
