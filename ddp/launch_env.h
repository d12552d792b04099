// defines: LaunchEnv — "who am I": rank, local rank, world size and master address;
//          check_launch, which checks what a step program read from its launcher (LaunchValues,
//          env, env_int, job_port) and completes it; and resolve_launch_env, the library's own
//          reading of whichever launcher started the process (torchrun, OpenMPI's mpirun, Slurm's
//          srun), which the diagnostics use and check_launch compares against.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace ddp {

struct Options;

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
  std::string launcher = "none";  // "options", "torchrun", "openmpi", "slurm" or "none"
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

// What a step program read about itself (steps 1-3 fill it in, on screen); unset means "not
// given". check_launch checks it and completes it into a LaunchEnv.
struct LaunchValues {
  std::optional<int> global_rank, local_rank, world_size, local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// One variable of this process's environment: nullopt when unset or empty.
std::optional<std::string> env(const std::string& name);
// The same as a whole number; a value that is not one is a ddp::Error naming the variable.
std::optional<int> env_int(const std::string& name);

// The rendezvous port of a Slurm job when its script exported none: 20000 + job id % 20000, so
// that the jobs sharing a node use different ports. (The course's batch scripts export a
// MASTER_PORT they found free on the first node, starting from the job id: clusters/common.sh.)
int job_port(int64_t job_id);

// The same for an mpirun job without MASTER_PORT, from its PMIx namespace (one per mpirun).
int mpirun_port(const std::string& job);

// The step programs' resolver. Checks `me` and returns the launch description:
// - nothing read (`me` empty): one process, rank 0 of 1 — unless a launcher started this
//   process as one of several ranks, which is an error naming what to do (for an exercise: the
//   TODO(stepN) to complete);
// - values read from a launcher's environment must agree with the library's own reading of it
//   (resolve_launch_env): a wrong variable is an error naming the right one, before anyone waits;
// - values a program set itself (step 1's workers, which spawn started) are taken as they are;
// - what was not read is completed (local world size from the launcher, master 127.0.0.1 when
//   all ranks share this node; the port rules of resolve_launch_env), then --master-addr, --master-port and
//   --init-method apply, and every value is range-checked with the launcher's variable named in the fix.
// Once the rank is known, run_main's errors start with "[rank R @ host]" (set_error_prefix).
LaunchEnv check_launch(const LaunchValues& me, const Options& options);

}  // namespace ddp
