// defines: spawn — the mp.spawn analogue. The parent re-executes this very program once per rank
//          (never fork() after LibTorch has run: a forked child deadlocks in OpenMP), waits for
//          all of them, and if one fails ends the others and reports which rank failed and why.
#pragma once

#include <functional>

namespace ddp {

// In the parent: starts `nprocs` workers running this program with the same arguments, each
// told its rank through the environment, and returns 0 when all succeed, 75 when they stopped
// for a requeue (SIGTERM/SIGUSR1), else 1. Signals sent to the parent are passed on.
// In a worker: returns worker(rank).
// A parent that a launcher started as one of its ranks (torchrun's RANK/LOCAL_RANK/WORLD_SIZE,
// OpenMPI's OMPI_COMM_WORLD_RANK, an srun step of several tasks) starts nothing: it prints one
// error line saying so and returns 1. Otherwise each rank would start its own set of workers,
// which then fight over one port and claim the same ranks. One srun task is fine.
int spawn(int nprocs, const std::function<int(int rank)>& worker);

// True in a process that spawn() started.
bool is_spawned_worker();

}  // namespace ddp
