#include "course/check_launch.h"

#include "course/options.h"
#include "course/run_main.h"
#include "ddp/error.h"
#include "ddp/host.h"
#include "ddp/spawn.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

// The program's name and where its TODO lives, for the error of a program that read nothing.
std::string unread_fix(const ProgramId& p, const LaunchEnv& seen) {
  const std::string folder = p.name + "/main.cpp";
  if (p.kind == "exercise" && p.step >= 2)
    return "complete TODO(step" + std::to_string(p.step) + ") in " + folder + ": read the variables " + seen.launcher +
           " sets into `me`";
  if (p.step == 0) return p.name + " trains alone: run it without a launcher";
  if (p.step == 1)
    return p.name + " starts its own workers: run it without a launcher (step 2 reads the ranks a launcher gives)";
  if (p.step == 2 && seen.launcher == "slurm")
    return "step 2 reads torchrun's and mpirun's variables, srun's come in step 3: run step3_multinode_slurm under "
           "srun, or start this program with torchrun or mpirun";
  return "read the variables " + seen.launcher + " sets into `me` before check_launch";
}

// "rank", what the program read, what the launcher says, and the launcher's variable for it.
void expect_same(const char* what, const std::optional<int>& mine, int theirs, const LaunchEnv& seen,
                 const char* variable, const ProgramId& p) {
  if (!mine || *mine == theirs) return;
  if (seen.launcher == "none")
    throw Error(p.label() + " read " + what + " " + std::to_string(*mine) +
                    ", but no launcher started it as one of "
                    "several ranks: it is rank 0 of 1",
                seen.warning.empty() ? "start it with torchrun, mpirun or srun" : seen.warning);
  throw Error(p.label() + " read " + what + " " + std::to_string(*mine) + ", but " + seen.launcher + " says " +
                  std::to_string(theirs) + " (" + variable + ")",
              std::string("read ") + what + " from " + variable);
}

}  // namespace

LaunchEnv check_launch(const LaunchValues& me, const Options& options) {
  const LaunchOverrides overrides = launch_overrides(options);
  // The library's own reading first: an inconsistent environment is an error before anything else.
  const LaunchEnv seen = resolve_launch_env(current_environment(), overrides);
  const ProgramId& p = options.program;
  LaunchEnv l = seen;
  const bool read_nothing = !me.global_rank && !me.world_size && !me.local_rank && !me.local_world_size;
  if (read_nothing) {
    if (seen.world_size > 1)
      throw Error(seen.launcher + " started " + p.label() + " as rank " + std::to_string(seen.global_rank) + " of " +
                      std::to_string(seen.world_size) + ", but the program read no rank from the environment",
                  unread_fix(p, seen));
  } else if (is_spawned_worker()) {
    // Step 1: the program started this worker and told it its rank; a launcher around the parent
    // (one srun task) says nothing about the workers.
    l = LaunchEnv{};
    l.launcher = "options";  // given by the program, as --master-port is (process_group.cpp's hints)
    l.global_rank = me.global_rank.value_or(0);
    l.world_size = me.world_size.value_or(1);
    l.local_rank = me.local_rank.value_or(l.global_rank);
    l.local_world_size = me.local_world_size.value_or(l.world_size);
    l.master_addr = "127.0.0.1";
  } else {
    const LaunchVariables var = launch_variables(seen.launcher);
    expect_same("rank", me.global_rank, seen.global_rank, seen, var.rank, p);
    expect_same("world size", me.world_size, seen.world_size, seen, var.world_size, p);
    expect_same("local rank", me.local_rank, seen.local_rank, seen, var.local_rank, p);
    expect_same("local world size", me.local_world_size, seen.local_world_size, seen, var.local_world_size, p);
  }
  // The program's master beats the library's guess; the command line beats both.
  if (me.master_addr && !overrides.master_addr) l.master_addr = *me.master_addr;
  if (me.master_port && !overrides.master_port) l.master_port = *me.master_port;
  if (overrides.master_port) l.master_port = *overrides.master_port;
  if (overrides.init_method) l.init_method = *overrides.init_method;
  validate_launch_env(l);
  set_error_prefix("[rank " + std::to_string(l.global_rank) + " @ " + host_name() + "]");
  return l;
}

}  // namespace ddpw
