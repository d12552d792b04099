#include "ddp/launch_env.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "ddp/error.h"
#include "ddp/hostlist.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

extern char** environ;

namespace ddp {
namespace {

std::optional<std::string> get(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int to_int(const std::string& key, const std::string& value) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty())
    throw Error(key + "='" + value + "' is not a whole number",
                "fix the launcher's environment or the option that sets " + key);
  return v;
}

std::optional<int> get_int(const EnvMap& env, const std::string& key) {
  auto v = get(env, key);
  if (!v) return std::nullopt;
  return to_int(key, *v);
}

// The first of several variables that is set, as a number.
std::optional<int> first_int(const EnvMap& env, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto v = get_int(env, k)) return v;
  return std::nullopt;
}

bool slurm_step(const EnvMap& env) {
  // The batch script itself has SLURM_PROCID=0 but no step id: only srun tasks have one.
  return get(env, "SLURM_PROCID") && (get(env, "SLURM_STEP_ID") || get(env, "SLURM_STEPID"));
}

void from_torchrun(const EnvMap& env, LaunchEnv& l) {
  l.launcher = "torchrun";
  l.global_rank = *get_int(env, "RANK");
  l.world_size = *get_int(env, "WORLD_SIZE");
  // Set by hand (env:// style) these two may be missing; fall back to other launchers' values.
  l.local_rank = first_int(env, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}).value_or(l.global_rank);
  l.local_world_size = first_int(env, {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}).value_or(l.world_size);
  l.node_rank = first_int(env, {"GROUP_RANK"}).value_or(0);
  const auto agent = get(env, "TORCHELASTIC_USE_AGENT_STORE");
  l.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  l.restart_count = get_int(env, "TORCHELASTIC_RESTART_COUNT").value_or(0);
}

void from_openmpi(const EnvMap& env, LaunchEnv& l) {
  l.launcher = "openmpi";
  l.global_rank = *first_int(env, {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"});
  auto size = get_int(env, "OMPI_COMM_WORLD_SIZE");
  if (!size)
    throw Error("PMIX_RANK is set but OMPI_COMM_WORLD_SIZE is not: cannot tell the world size",
                "launch with OpenMPI's mpirun, or with srun --mpi=pmix inside a Slurm job");
  l.world_size = *size;
  l.local_rank = get_int(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(l.global_rank);
  l.local_world_size = get_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(l.world_size);
}

void from_slurm(const EnvMap& env, LaunchEnv& l) {
  l.launcher = "slurm";
  l.global_rank = *get_int(env, "SLURM_PROCID");
  l.local_rank = get_int(env, "SLURM_LOCALID").value_or(0);
  l.node_rank = get_int(env, "SLURM_NODEID").value_or(0);

  std::vector<int> per_node;  // tasks on each node of the step, e.g. from "2(x3),1"
  for (const char* k : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (auto v = get(env, k)) {
      per_node = expand_tasks_per_node(*v);
      break;
    }
  }
  if (auto n = first_int(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"})) {
    l.world_size = *n;
  } else if (auto nodes = get_int(env, "SLURM_NNODES"); nodes && get_int(env, "SLURM_NTASKS_PER_NODE")) {
    l.world_size = *nodes * *get_int(env, "SLURM_NTASKS_PER_NODE");  // --ntasks-per-node only
  } else if (!per_node.empty()) {
    l.world_size = std::accumulate(per_node.begin(), per_node.end(), 0);
  } else {
    throw Error(
        "inside an srun step but none of SLURM_NTASKS, SLURM_NNODES x "
        "SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE is set",
        "request tasks explicitly: #SBATCH --ntasks-per-node=N (and --nodes=M)");
  }
  if (auto v = get_int(env, "SLURM_NTASKS_PER_NODE"); v && per_node.empty()) {
    l.local_world_size = *v;
  } else if (!per_node.empty() && l.node_rank < static_cast<int>(per_node.size())) {
    l.local_world_size = per_node[l.node_rank];
  } else {
    // Only the task count is known: spread it over the step's nodes (the first nodes get the
    // remainder, as Slurm's default block distribution does).
    const int nodes =
        std::max(1, first_int(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}).value_or(1));
    l.local_world_size = (l.world_size + nodes - 1) / nodes;
  }
  // srun --mpi=pmix sets PMIX_RANK too; it must be this task's rank.
  if (auto pmix = get_int(env, "PMIX_RANK"); pmix && *pmix != l.global_rank)
    throw Error(
        "PMIX_RANK=" + std::to_string(*pmix) + " but SLURM_PROCID=" + std::to_string(l.global_rank) +
            ": two launchers disagree about this process's rank",
        "start the program with one launcher: srun (optionally --mpi=pmix) or mpirun, not one inside the other");
}

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

LaunchEnv resolve_launch_env(const EnvMap& env, const LaunchOverrides& o) {
  LaunchEnv l;
  if (o.global_rank && o.world_size) {
    l.launcher = "options";
    l.global_rank = *o.global_rank;
    l.world_size = *o.world_size;
    l.local_rank = l.global_rank;
    l.local_world_size = l.world_size;
  } else if (get(env, "RANK") && get(env, "WORLD_SIZE")) {
    from_torchrun(env, l);
  } else if (get(env, "OMPI_COMM_WORLD_RANK")) {
    from_openmpi(env, l);
  } else if (slurm_step(env)) {
    from_slurm(env, l);
  } else if (get(env, "PMIX_RANK")) {
    from_openmpi(env, l);
  } else {
    l.launcher = "none";
    if (get(env, "SLURM_PROCID") && get_int(env, "SLURM_NTASKS").value_or(1) > 1)
      l.warning =
          "running inside a Slurm job but not as an srun task: this is ONE process. "
          "Start the program with srun to get one process per task.";
  }
  if (o.global_rank && l.launcher != "options") l.global_rank = *o.global_rank;
  if (o.world_size && l.launcher != "options") l.world_size = *o.world_size;
  if (o.local_rank) l.local_rank = *o.local_rank;
  if (o.local_world_size) l.local_world_size = *o.local_world_size;

  // Master address: option, MASTER_ADDR (or its alias MASTER_ADDRESS), then the launcher's default.
  std::optional<std::string> addr = o.master_addr;
  if (!addr) addr = get(env, "MASTER_ADDR");
  if (!addr) addr = get(env, "MASTER_ADDRESS");
  if (!addr && l.launcher == "slurm") {
    auto nodelist = get(env, "SLURM_STEP_NODELIST");
    if (!nodelist) nodelist = get(env, "SLURM_JOB_NODELIST");
    if (!nodelist) nodelist = get(env, "SLURM_NODELIST");
    if (nodelist) addr = expand_hostlist(*nodelist).front();
  }
  if (!addr && l.local_world_size == l.world_size) addr = "127.0.0.1";  // all ranks on one node
  if (addr) {
    l.master_addr = *addr;
  } else if (l.world_size > 1) {
    throw Error("no master address: " + std::to_string(l.world_size) + " ranks over several nodes (" + l.launcher +
                    ") but MASTER_ADDR is not set",
                "export MASTER_ADDR=$(hostname -s) in the batch script before mpirun/srun");
  }

  // Master port: option, MASTER_PORT, a per-job port under Slurm (jobs sharing a node differ).
  if (o.master_port) {
    l.master_port = *o.master_port;
  } else if (auto p = get_int(env, "MASTER_PORT")) {
    l.master_port = *p;
  } else if (auto job = get_int(env, "SLURM_JOB_ID"); job && l.launcher == "slurm") {
    l.master_port = job_port(*job);
  } else if (auto pmix_namespace = get(env, "PMIX_NAMESPACE"); pmix_namespace && l.launcher == "openmpi") {
    l.master_port = mpirun_port(*pmix_namespace);
  }
  if (o.init_method) l.init_method = *o.init_method;
  validate_launch_env(l);
  return l;
}

void validate_launch_env(const LaunchEnv& l) {
  const std::string who = " (launcher: " + l.launcher + ")";
  const LaunchVariables var = launch_variables(l.launcher);
  DDP_CHECK(l.world_size >= 1, "world size " + std::to_string(l.world_size) + " is not positive" + who,
            std::string("check ") + var.world_size);
  DDP_CHECK(l.global_rank >= 0 && l.global_rank < l.world_size,
            "rank " + std::to_string(l.global_rank) + " is outside the world of " + std::to_string(l.world_size) +
                " ranks" + who,
            std::string(var.rank) + " must be in [0, " + var.world_size + ")");
  DDP_CHECK(l.local_world_size >= 1 && l.local_world_size <= l.world_size,
            "local world size " + std::to_string(l.local_world_size) + " does not fit a world of " +
                std::to_string(l.world_size) + who,
            std::string("check ") + var.local_world_size);
  DDP_CHECK(l.local_rank >= 0 && l.local_rank < l.local_world_size,
            "local rank " + std::to_string(l.local_rank) + " is outside the node's " +
                std::to_string(l.local_world_size) + " local ranks" + who,
            std::string(var.local_rank) + " must be in [0, " + var.local_world_size + ")");
  if (!l.init_method.empty()) return;  // a rendezvous file: no port
  DDP_CHECK(l.master_port >= 0 && l.master_port < 65536,
            "master port " + std::to_string(l.master_port) + " is not a TCP port" + who,
            "choose a port in 1024-65535 with " + setting_name(Setting::kMasterPort) + " or MASTER_PORT");
  // 0: none chosen (no fixed default, where two jobs sharing a node would meet): the rendezvous
  // takes any free port for one process and refuses to guess one for several.
}

LaunchVariables launch_variables(const std::string& launcher) {
  if (launcher == "openmpi")
    return {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE (mpirun -np)", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE (mpirun --map-by ppr:N:node)"};
  if (launcher == "slurm")
    return {"SLURM_PROCID", "SLURM_NTASKS (--ntasks, or --nodes x --ntasks-per-node)", "SLURM_LOCALID",
            "--ntasks-per-node"};
  if (launcher == "options") return {"the rank", "the world size", "the local rank", "the local world size"};
  return {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
}

std::string describe(const LaunchEnv& l) {
  std::string s = l.launcher + ": rank " + std::to_string(l.global_rank) + " of " + std::to_string(l.world_size) +
                  ", local rank " + std::to_string(l.local_rank) + " of " + std::to_string(l.local_world_size) + ", ";
  s +=
      l.init_method.empty() ? "master " + l.master_addr + ":" + std::to_string(l.master_port) : "init " + l.init_method;
  return s;
}

std::optional<std::string> env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<int> env_int(const std::string& name) {
  const auto value = env(name);
  if (!value) return std::nullopt;
  return to_int(name, *value);
}

int job_port(int64_t job_id) { return static_cast<int>(20000 + job_id % 20000); }

int mpirun_port(const std::string& job) {
  uint32_t h = 2166136261u;  // FNV-1a of the job's name
  for (unsigned char c : job) h = (h ^ c) * 16777619u;
  return static_cast<int>(20000 + h % 12000);  // below the kernel's ports for outgoing connections
}

}  // namespace ddp
