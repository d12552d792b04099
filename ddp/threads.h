// defines: choose_threads and thread_choice — intra-op threads per rank, from the CPUs this process
//          may run on (its affinity mask), OMP_NUM_THREADS and SLURM_CPUS_PER_TASK, shared among
//          the ranks that run on the same CPUs; with the reason, for the settings table.
#pragma once

#include <string>

#include "ddp/launch_env.h"

namespace ddp {

struct ThreadChoice {
  int count = 1;
  std::string why;  // e.g. "SLURM_CPUS_PER_TASK=16 / 2 workers"
};

// What the choice depends on, read from this process by thread_choice(requested, local_world_size).
struct CpuFacts {
  int mask_cpus = 1;    // CPUs in this process's affinity mask (sched_getaffinity)
  int online_cpus = 1;  // CPUs of the machine
  // The ranks on this node run inside one process's CPU set: workers that spawn() or torchrun
  // started from one task, which share that task's CPUs (and its SLURM_CPUS_PER_TASK).
  bool workers_share_task = false;
};

// The rule (a pure function, unit-tested with given facts):
//   requested > 0 is used as given;
//   otherwise the budget is the CPUs in the mask, divided among the node's ranks when they share it
//   (workers of one task, or no binding at all: the mask is the whole machine), and capped by
//   SLURM_CPUS_PER_TASK (per task: divided among the workers of the task);
//   OMP_NUM_THREADS, when set, is used up to that budget. Never fewer than 1.
ThreadChoice thread_choice(int requested, int local_world_size, const CpuFacts& cpus, const EnvMap& env);

// The same, for this process: its affinity mask, the machine, the environment, and whether it is a
// worker of spawn() or of torchrun.
ThreadChoice thread_choice(int requested, int local_world_size);

// thread_choice(...).count: the threads to give torch::set_num_threads.
int choose_threads(int requested, int local_world_size);

// CPUs in this process's affinity mask (all online CPUs if the mask cannot be read).
int affinity_cpus();

}  // namespace ddp
