// defines: LaunchEnv and resolve_launch_env — "who am I": rank, local rank, world size and master
//          address, from explicit options or from whichever launcher started the process
//          (torchrun, OpenMPI's mpirun, Slurm's srun).
#pragma once

#include <map>
#include <optional>
#include <string>

namespace ddp {

struct LaunchEnv {
  int global_rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string init_method;  // empty: TCP store at master_addr:master_port; or "file:///path"
  bool agent_store = false;  // torchrun hosts the store itself (TORCHELASTIC_USE_AGENT_STORE)
  int restart_count = 0;     // torchrun's TORCHELASTIC_RESTART_COUNT: keys of a new attempt are fresh
  std::string launcher = "none";  // "options", "torchrun", "openmpi", "slurm" or "none"
  std::string warning;      // set when something looks like a launch mistake (printed, not fatal)
};

// Values given on the command line; each one beats whatever the launcher says.
struct LaunchOverrides {
  std::optional<int> global_rank, local_rank, world_size, local_world_size, master_port;
  std::optional<std::string> master_addr, init_method;
};

using EnvMap = std::map<std::string, std::string>;

// A copy of this process's environment.
EnvMap current_environment();

// Precedence: explicit options; torchrun (RANK, WORLD_SIZE, LOCAL_RANK, ...); OpenMPI
// (OMPI_COMM_WORLD_*) — before Slurm, because mpirun inside an allocation inherits misleading
// SLURM_* values; Slurm (SLURM_PROCID inside an srun step); PMIX_RANK with OMPI_COMM_WORLD_SIZE
// (another PMIx launcher); else a single process. Under `srun --mpi=pmix` both PMIX_RANK and
// SLURM_PROCID are set and must agree. MASTER_ADDRESS is accepted as an alias of MASTER_ADDR.
// Throws ddp::Error on inconsistent input.
LaunchEnv resolve_launch_env(const EnvMap& env, const LaunchOverrides& overrides = {});

// One line for logs: "torchrun: rank 1 of 2, local rank 1 of 2, master 127.0.0.1:29500".
std::string describe(const LaunchEnv& launch);

}  // namespace ddp
