// defines: spawn — the mp.spawn analogue. The parent re-executes this very program once per rank
//          (never fork() after LibTorch has run: a forked child deadlocks in OpenMP), waits for
//          all of them, and if one fails ends the others and reports which rank failed and why.
#pragma once

#include <functional>
#include <string>

namespace ddp {

// In the parent: starts `nprocs` workers running this program with the same arguments, each
// told its rank through the environment, and returns 0 when all succeed, 75 when they stopped
// for a requeue (SIGTERM/SIGUSR1), else 1. Signals sent to the parent are passed on.
// In a worker: returns worker(rank); a worker ends when its parent does (PR_SET_PDEATHSIG), and a
// worker whose parent is already gone returns 1 at once.
// A parent that a launcher started as one of its ranks (torchrun's RANK/LOCAL_RANK/WORLD_SIZE,
// OpenMPI's OMPI_COMM_WORLD_RANK, an srun step of several tasks) starts nothing: it prints one
// error line saying so and returns 1. Otherwise each rank would start its own set of workers,
// which then fight over one port and claim the same ranks. One srun task is fine.
int spawn(int nprocs, const std::function<int(int rank)>& worker);

// True in a process that spawn() started.
bool is_spawned_worker();

// The launcher that started this process as one of its ranks, in words, e.g. "torchrun (RANK,
// LOCAL_RANK or WORLD_SIZE is set)", or "" when spawn() may start workers here (no launcher, one
// srun task). A program can ask before it does any work; spawn() refuses to start workers then.
std::string started_by_launcher();

// The port the workers meet at when the program chose none. In the parent: a free port on this
// host, chosen by the kernel (bind to port 0) and kept bound and listening, so that no other job can
// take it between choosing and using it; spawn() hands that socket to rank 0, whose store serves
// on it (as torchrun hands its socket to the store). In a worker: the port its parent chose.
int spawn_master_port();

// The listening socket behind spawn_master_port(), if this process holds one for `port` (rank 0
// of spawn(), or a program that serves the store itself without spawning); else -1. The caller
// owns it from now on: c10d's TCPStoreOptions::masterListenFd takes it over.
int take_spawn_listen_socket(int port);

}  // namespace ddp
