// defines: LaunchEnv — "who am I": rank, local rank, world size and master address; and
//          resolve_launch_env, the library's reading of whichever launcher started the process
//          (torchrun, OpenMPI's mpirun, Slurm's srun); env, env_int, job_port and mpirun_port for a
//          program that reads its launcher's variables itself; validate_launch_env.
#pragma once

#include <cstdint>
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
  int master_port = 0;            // 0: none chosen (one process: any free port, nobody else needs it)
  std::string init_method;        // empty: TCP store at master_addr:master_port; or "file:///path"
  bool agent_store = false;       // torchrun hosts the store itself (TORCHELASTIC_USE_AGENT_STORE)
  int restart_count = 0;          // torchrun's TORCHELASTIC_RESTART_COUNT: keys of a new attempt are fresh
  std::string launcher = "none";  // "options" (the program set it), "torchrun", "openmpi", "slurm" or "none"
  std::string warning;            // set when something looks like a launch mistake (printed, not fatal)
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

// Throws ddp::Error, naming the launcher's variable to fix, when a value is out of range: world
// size below 1, a rank outside it, a local world size or local rank that does not fit, a master
// port that is not a TCP port (0 means none chosen). resolve_launch_env calls it.
void validate_launch_env(const LaunchEnv& launch);

// The variables (or options) that give a launcher's ranks, in its own words, for error hints:
// {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"} for torchrun, OMPI_COMM_WORLD_* for
// "openmpi", SLURM_* for "slurm", words for "options".
struct LaunchVariables {
  const char *rank, *world_size, *local_rank, *local_world_size;
};
LaunchVariables launch_variables(const std::string& launcher);

// One variable of this process's environment: nullopt when unset or empty.
std::optional<std::string> env(const std::string& name);
// The same as a whole number; a value that is not one is a ddp::Error naming the variable.
std::optional<int> env_int(const std::string& name);

// The rendezvous port of a Slurm job when its script exported none: 20000 + job id % 20000, so
// that the jobs sharing a node use different ports. (A batch script may rather export a
// MASTER_PORT it found free on the first node.)
int job_port(int64_t job_id);

// The same for an mpirun job without MASTER_PORT, from its PMIx namespace (one per mpirun).
int mpirun_port(const std::string& job);

}  // namespace ddp
