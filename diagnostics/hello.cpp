// hello — "is my launch right?", before any training (SuperCloud's torch_test.py, with checks).
// Each rank finds out who it is from its launcher, picks its device, checks what it can check
// alone (ranks vs GPUs on this node, the master answers), joins the process group and reports;
// rank 0 prints one ordered table. Exit 0 only when every rank reported and no two ranks share a
// GPU or a local rank.
//
//   mpirun -np 2 build/bin/hello
//   torchrun --standalone --nproc_per_node=2 --no-python build/bin/hello
//   srun build/bin/hello                                    (inside a Slurm allocation)
#include <unistd.h>

#include <CLI/CLI.hpp>  // defines: CLI::App (hello's own --device option)
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/device.h"             // defines: choose_device, device_name
#include "ddp/error.h"              // defines: ddp::Error, run_main
#include "ddp/launch_env.h"         // defines: resolve_launch_env
#include "ddp/options.h"            // defines: parse_options
#include "ddp/process_group.h"      // defines: ProcessGroup
#include "ddp/run_report.h"         // defines: host_name
#include "diagnostics/preflight.h"  // defines: wait_for_master, check_master_is_here, check_init_file,
                                    //          idle_gpus_warning

#ifdef DDPW_HAVE_CUDA
#include <cuda_runtime_api.h>  // defines: cudaDeviceGetPCIBusId
#endif

namespace {

// One rank's report: column name -> value. Variables of the environment keep their own name.
using Report = std::map<std::string, std::string>;

const std::vector<std::string> kColumns = {"rank", "host", "local rank", "pid", "device", "GPU bus id",
                                           "CUDA_VISIBLE_DEVICES"};

// The communication libraries' settings: NCCL_*, TORCH_NCCL_*, GLOO_* (SuperCloud prints every
// variable whose name contains NCCL).
bool is_comm_variable(const std::string& name) {
  return name.find("NCCL") != std::string::npos || name.rfind("GLOO_", 0) == 0;
}

// The PCI address tells GPUs apart across ranks whose CUDA_VISIBLE_DEVICES renumber them.
std::string gpu_bus_id(const torch::Device& device) {
  if (!device.is_cuda()) return "-";
#ifdef DDPW_HAVE_CUDA
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, device.index()) == cudaSuccess) return id;
#endif
  return "?";
}

Report my_report(const ddp::LaunchEnv& launch, const torch::Device& device, const ddp::EnvMap& env) {
  Report r;
  r["rank"] = std::to_string(launch.global_rank);
  // Slurm's node name too where it differs: test clusters run several Slurm nodes on one host.
  r["host"] = ddp::host_name();
  if (auto slurm = env.find("SLURMD_NODENAME"); slurm != env.end() && slurm->second != r["host"])
    r["host"] += "/" + slurm->second;
  r["pid"] = std::to_string(::getpid());
  r["local rank"] = std::to_string(launch.local_rank) + " of " + std::to_string(launch.local_world_size);
  r["device"] = ddp::device_name(device);
  r["GPU bus id"] = gpu_bus_id(device);
  auto cvd = env.find("CUDA_VISIBLE_DEVICES");  // unset (all GPUs) differs from empty (none)
  r["CUDA_VISIBLE_DEVICES"] = cvd == env.end() ? "(unset)" : "'" + cvd->second + "'";
  for (const auto& [name, value] : env)
    if (is_comm_variable(name)) r[name] = value;
  return r;
}

// "key\tvalue" lines; the store carries bytes, tabs and newlines in values become spaces.
std::string encode(const Report& report) {
  std::string out;
  for (auto [key, value] : report) {
    for (char& c : value)
      if (c == '\n' || c == '\t') c = ' ';
    out += key + '\t' + value + '\n';
  }
  return out;
}

Report decode(const std::string& text) {
  Report report;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) report[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return report;
}

// "0-2,5": a compact list of ranks.
std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

void print_table(const std::vector<Report>& reports) {
  std::vector<size_t> width;
  for (const auto& column : kColumns) {
    size_t w = column.size();
    for (const auto& r : reports) w = std::max(w, r.count(column) ? r.at(column).size() : 0);
    width.push_back(w);
  }
  auto print_row = [&](auto value_of) {
    std::string line;
    for (size_t c = 0; c < kColumns.size(); ++c) {
      std::string v = value_of(kColumns[c]);
      line += v + std::string(width[c] - v.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  };
  print_row([](const std::string& column) { return column; });
  for (const auto& r : reports)
    print_row([&](const std::string& column) { return r.count(column) ? r.at(column) : std::string("?"); });
}

// Each communication variable once: its value and which ranks have it.
void print_comm_variables(const std::vector<Report>& reports) {
  std::set<std::string> names;
  for (const auto& r : reports)
    for (const auto& [key, value] : r)
      if (is_comm_variable(key)) names.insert(key);
  if (names.empty()) {
    std::printf("# NCCL/Gloo variables: none set on any rank\n");
    return;
  }
  std::printf("# NCCL/Gloo variables:\n");
  for (const auto& name : names) {
    std::map<std::string, std::vector<int>> ranks_by_value;
    for (size_t rank = 0; rank < reports.size(); ++rank) {
      auto it = reports[rank].find(name);
      ranks_by_value[it == reports[rank].end() ? "(unset)" : it->second].push_back(static_cast<int>(rank));
    }
    if (ranks_by_value.size() == 1) {
      std::printf("#   %s=%s (all ranks)\n", name.c_str(), ranks_by_value.begin()->first.c_str());
      continue;
    }
    std::printf("#   %s differs:", name.c_str());
    for (const auto& [value, ranks] : ranks_by_value)
      std::printf(" %s on rank(s) %s;", value.c_str(), ranks_text(ranks).c_str());
    std::printf("\n");
  }
}

// What a wrong launch looks like once every rank has reported. Empty: all is well.
std::vector<std::string> launch_problems(const std::vector<Report>& reports, int world_size) {
  std::vector<std::string> problems;
  if (static_cast<int>(reports.size()) != world_size)
    problems.push_back(std::to_string(reports.size()) + " of " + std::to_string(world_size) + " ranks reported");
  std::map<std::string, std::vector<int>> by_gpu, by_local_rank, by_node;
  for (size_t i = 0; i < reports.size(); ++i) {
    const Report& r = reports[i];
    const int rank = static_cast<int>(i);
    if (!r.count("rank") || r.at("rank") != std::to_string(rank)) {
      problems.push_back("report " + std::to_string(rank) + " is garbled or came from another rank");
      continue;
    }
    const std::string& node = r.at("host");
    by_node[node].push_back(rank);
    by_local_rank[node + ", local rank " + r.at("local rank")].push_back(rank);
    const std::string& bus = r.at("GPU bus id");
    const std::string machine = node.substr(0, node.find('/'));  // GPUs belong to the machine
    if (bus != "-" && bus != "?") by_gpu[machine + " GPU " + bus].push_back(rank);
  }
  for (const auto& [gpu, ranks] : by_gpu)
    if (ranks.size() > 1)
      problems.push_back("ranks " + ranks_text(ranks) + " share " + gpu +
                         " (NCCL: \"Duplicate GPU detected\"); fix: one GPU per rank, --ntasks-per-node = "
                         "GPUs per node (--gres=gpu:N), device = the launcher's local rank");
  for (const auto& [where, ranks] : by_local_rank)
    if (ranks.size() > 1)
      problems.push_back("ranks " + ranks_text(ranks) + " both claim " + where +
                         "; fix: take the local rank from the launcher (LOCAL_RANK, SLURM_LOCALID, "
                         "OMPI_COMM_WORLD_LOCAL_RANK), not from rank % GPUs");
  for (const auto& [node, ranks] : by_node) {
    const std::string claimed = reports[ranks.front()].at("local rank");  // "l of k"
    const std::string k = claimed.substr(claimed.find(" of ") + 4);
    if (k != std::to_string(ranks.size()))
      problems.push_back(node + " runs " + std::to_string(ranks.size()) + " rank(s) (" + ranks_text(ranks) +
                         ") but rank " + std::to_string(ranks.front()) + " thinks the node has " + k +
                         "; fix: the launcher's tasks per node (--ntasks-per-node, --nproc_per_node)");
  }
  return problems;
}

int hello(const ddp::Options& options, const ddp::LaunchEnv& launch, const ddp::EnvMap& env) {
  using Clock = std::chrono::steady_clock;
  if (!launch.warning.empty()) std::fprintf(stderr, "[RANK %d] warning: %s\n", launch.global_rank, launch.warning.c_str());

  // Checks a rank can make alone, before any collective. choose_device refuses more ranks than
  // GPUs on this node and binds the GPU (before NCCL starts).
  const torch::Device device = ddp::choose_device(options.device, launch.local_rank, launch.local_world_size);
  // Fewer ranks than GPUs works, so it is a warning (once per node), not an error. An explicit
  // --device cuda:N chooses its GPUs on purpose.
  if (device.is_cuda() && options.device.rfind("cuda:", 0) != 0 && launch.local_rank == 0) {
    const std::string idle = diagnostics::idle_gpus_warning(launch.local_world_size, ddp::visible_gpus());
    if (!idle.empty()) std::fprintf(stderr, "[RANK %d] warning: %s\n", launch.global_rank, idle.c_str());
  }
  const ddp::ProcessGroupOptions group_options = ddp::process_group_options(options);
  if (!launch.init_method.empty())
    diagnostics::check_init_file(launch.init_method);
  else if (launch.global_rank != 0)  // rank 0 serves the rendezvous: it may not listen yet
    diagnostics::wait_for_master(launch, group_options.rendezvous_timeout);
  else if (!env.count("TORCHELASTIC_USE_AGENT_STORE"))  // under torchrun, torchrun serves it
    diagnostics::check_master_is_here(launch);

  const auto start = Clock::now();
  ddp::ProcessGroup group(launch, device, group_options);
  const double join_s = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<Report> reports;
  for (const auto& text : group.all_gather_strings(encode(my_report(launch, device, env))))
    reports.push_back(decode(text));
  const auto problems = launch_problems(reports, launch.world_size);

  if (launch.global_rank == 0) {
    std::printf("# hello: %s\n", ddp::describe(launch).c_str());
    std::printf("# backend %s, LibTorch %s, joined the process group in %.2f s\n", group.backend_name().c_str(),
                DDPW_TORCH_VERSION, join_s);
    print_table(reports);
    print_comm_variables(reports);
    for (const auto& p : problems) std::printf("# FAILED: %s\n", p.c_str());
    std::printf("%s: %zu of %d ranks reported\n", problems.empty() ? "OK" : "FAILED", reports.size(), launch.world_size);
    std::fflush(stdout);
  }
  return problems.empty() ? ddp::kExitOk : ddp::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  const ddp::Options options = ddp::parse_options(
      argc, argv, "Checks a distributed launch: every rank reports host, rank, device and NCCL settings",
      ddp::kDistributedOptions, [](CLI::App& app, ddp::Options& o) {
        app.add_option("--device", o.device, "auto (CUDA if available, else CPU), cpu, cuda or cuda:N");
      });
  const ddp::EnvMap env = ddp::current_environment();

  ddp::LaunchEnv launch;
  if (int rc = ddp::run_main([&] { launch = ddp::resolve_launch_env(env, ddp::launch_overrides(options)); return 0; }, "[hello]"))
    return rc;

  return ddp::run_main([&] { return hello(options, launch, env); },
                       "[RANK " + std::to_string(launch.global_rank) + " on " + ddp::host_name() + "]");
}
