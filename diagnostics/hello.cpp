// hello — "is my launch right?", before any training (SuperCloud's torch_test.py and Della's
// debug script, with checks). Each rank finds out who it is from its launcher, picks its device,
// checks what it can check alone (the master answers), meets the others at the rendezvous store
// and reports there, before any collective; rank 0 prints one ordered table. Only then do the
// ranks join the backend (so that ranks sharing a GPU under NCCL get the table and a FAILED line,
// not NCCL's "Duplicate GPU detected"), and run one DDP forward and backward of Della's
// Linear(42,3) model: every rank must hold the same output, and the gradient of the mean loss over
// all ranks' inputs. Exit 0 only when every rank reported, no two ranks share a local rank or (NCCL)
// a GPU, and the DDP check passed.
//
//   mpirun -np 2 build/bin/hello
//   torchrun --standalone --nproc_per_node=2 --no-python build/bin/hello
//   srun build/bin/hello                                    (inside a Slurm allocation)
#include <unistd.h>

#include <CLI/CLI.hpp>  // defines: CLI::App (hello's own --device option)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "course/from_options.h"            // defines: process_group_options
#include "course/options.h"                 // defines: parse_options
#include "course/run_main.h"                // defines: run_main, ddp::Error (error.h)
#include "ddp/config.h"                     // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/detail/cuda_check.h"          // defines: check_cuda_support (LibTorch's archs, the driver)
#include "ddp/detail/gpu_sharing.h"         // defines: judge_gpu_sharing, ranks_text
#include "ddp/device.h"                     // defines: choose_device, device_name, gpu_bus_id
#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel (the DDP check)
#include "ddp/host.h"                       // defines: host_name
#include "ddp/launch_env.h"                 // defines: resolve_launch_env
#include "ddp/process_group.h"              // defines: ProcessGroup, resolve_backend
#include "diagnostics/preflight.h"          // defines: wait_for_master, check_master_is_here, check_init_file,
                                            //          idle_gpus_warning

namespace {

// One rank's report: column name -> value. Variables of the environment keep their own name.
using Report = std::map<std::string, std::string>;

const std::vector<std::string> kColumns = {"rank",   "host",       "local rank",          "pid",
                                           "device", "GPU bus id", "CUDA_VISIBLE_DEVICES"};

// The communication libraries' settings: NCCL_*, TORCH_NCCL_*, GLOO_* (SuperCloud prints every
// variable whose name contains NCCL).
bool is_comm_variable(const std::string& name) {
  return name.find("NCCL") != std::string::npos || name.rfind("GLOO_", 0) == 0;
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
  r["GPU bus id"] = device.is_cuda() ? ddp::gpu_bus_id(device) : "-";  // tells GPUs apart across renumberings
  auto cvd = env.find("CUDA_VISIBLE_DEVICES");                         // unset (all GPUs) differs from empty (none)
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
      std::printf(" %s on rank(s) %s;", value.c_str(), ddp::ranks_text(ranks).c_str());
    std::printf("\n");
  }
}

struct Problems {
  std::vector<std::string> failed;  // each one fails the run
  std::string note;                 // ranks share a GPU, which this backend allows
};

// What a wrong launch looks like once every rank has reported (every rank computes the same).
Problems launch_problems(const std::vector<Report>& reports, int world_size, const std::string& backend) {
  Problems problems;
  if (static_cast<int>(reports.size()) != world_size)
    problems.failed.push_back(std::to_string(reports.size()) + " of " + std::to_string(world_size) + " ranks reported");
  std::map<std::string, std::vector<int>> by_local_rank, by_node;
  std::vector<ddp::GpuClaim> claims;
  for (size_t i = 0; i < reports.size(); ++i) {
    const Report& r = reports[i];
    const int rank = static_cast<int>(i);
    if (!r.count("rank") || r.at("rank") != std::to_string(rank)) {
      problems.failed.push_back("report " + std::to_string(rank) + " is garbled or came from another rank");
      claims.push_back({});
      continue;
    }
    const std::string& node = r.at("host");
    by_node[node].push_back(rank);
    by_local_rank[node + ", local rank " + r.at("local rank")].push_back(rank);
    const std::string& bus = r.at("GPU bus id");
    const std::string machine = node.substr(0, node.find('/'));  // GPUs belong to the machine
    claims.push_back({machine, bus == "-" ? "" : bus});
  }
  const ddp::SharingVerdict sharing = ddp::judge_gpu_sharing(backend, claims);
  if (sharing.refused) problems.failed.push_back(sharing.what + "; fix: " + sharing.hint);
  problems.note = sharing.note;
  for (const auto& [where, ranks] : by_local_rank)
    if (ranks.size() > 1)
      problems.failed.push_back("ranks " + ddp::ranks_text(ranks) + " both claim " + where +
                                "; fix: take the local rank from the launcher (LOCAL_RANK, SLURM_LOCALID, "
                                "OMPI_COMM_WORLD_LOCAL_RANK), not from rank % GPUs");
  for (const auto& [node, ranks] : by_node) {
    const std::string claimed = reports[ranks.front()].at("local rank");  // "l of k"
    const std::string k = claimed.substr(claimed.find(" of ") + 4);
    if (k != std::to_string(ranks.size()))
      problems.failed.push_back(node + " runs " + std::to_string(ranks.size()) + " rank(s) (" + ddp::ranks_text(ranks) +
                                ") but rank " + std::to_string(ranks.front()) + " thinks the node has " + k +
                                "; fix: the launcher's tasks per node (--ntasks-per-node, --nproc_per_node)");
  }
  return problems;
}

// Della's debug model: Linear(42, 3), ReLU, log_softmax (float64 here, so the check can be tight).
struct DellaNetImpl : torch::nn::Module {
  DellaNetImpl() {
    fc = register_module("fc", torch::nn::Linear(42, 3));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::log_softmax(torch::relu(fc->forward(x)), 1); }
  torch::nn::Linear fc{nullptr};
};

// Four samples and their classes, the same on every rank for the same seed.
std::pair<torch::Tensor, torch::Tensor> della_batch(uint64_t seed, const torch::Device& device) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto x = torch::rand({4, 42}, gen, torch::kFloat64);
  auto y = torch::randint(0, 3, {4}, gen, torch::kLong);
  return {x.to(device), y.to(device)};
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

constexpr double kDdpTolerance = 1e-10;  // float64, a few additions in another order

struct DdpCheck {
  std::string line;  // what rank 0 prints
  bool ok;
};

// One DDP forward and backward. The ranks start from different weights (the wrap must give them
// rank 0's), evaluate one common input (the outputs must agree) and train on a batch of their own;
// each rank then computes, without communication, the gradient of the mean loss over all ranks'
// batches and compares it with what DDP's allreduce left in .grad. The verdict travels through the
// store, so every rank exits with the same code.
DdpCheck ddp_check(const std::shared_ptr<ddp::ProcessGroup>& group, const torch::Device& device) {
  const int rank = group->rank(), n = group->size();
  torch::manual_seed(1000 + static_cast<uint64_t>(rank));
  auto model = std::make_shared<DellaNetImpl>();
  model->to(device);
  ddp::DistributedDataParallel<DellaNetImpl> ddp_model(model, group);

  auto reference = std::make_shared<DellaNetImpl>();  // rank 0's weights, as the wrap left them
  reference->to(device);
  const auto params = model->parameters(), reference_params = reference->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) reference_params[i].copy_(params[i]);
  }

  auto common = della_batch(7, device).first;
  std::string output;
  {
    torch::NoGradGuard no_grad;
    const auto out = ddp_model->forward(common).flatten().cpu();
    char number[40];
    for (int64_t i = 0; i < out.numel(); ++i) {
      std::snprintf(number, sizeof number, "%s%.17g", i ? " " : "", out[i].item<double>());
      output += number;
    }
  }

  auto [x, y] = della_batch(100 + static_cast<uint64_t>(rank), device);
  torch::nll_loss(ddp_model->forward(x), y).backward();  // DDP averages the gradients

  torch::Tensor mean_loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  for (int r = 0; r < n; ++r) {
    auto [xr, yr] = della_batch(100 + static_cast<uint64_t>(r), device);
    mean_loss = mean_loss + torch::nll_loss(reference->forward(xr), yr) / n;
  }
  mean_loss.backward();
  double grad_diff = 0;
  for (size_t i = 0; i < params.size(); ++i)
    grad_diff = std::max(grad_diff, max_abs(params[i].grad() - reference_params[i].grad()));

  char mine[64];
  std::snprintf(mine, sizeof mine, "%.17g", grad_diff);
  const auto all = group->all_gather_strings(std::string(mine) + "\t" + output);
  double worst_grad = 0, worst_output = 0;
  std::vector<double> first;
  for (const auto& row : all) {
    const auto tab = row.find('\t');
    worst_grad = std::max(worst_grad, std::stod(row.substr(0, tab)));
    std::istringstream values(row.substr(tab + 1));
    std::vector<double> out;
    for (double v; values >> v;) out.push_back(v);
    if (first.empty()) first = out;
    if (out.size() != first.size()) worst_output = INFINITY;
    for (size_t i = 0; i < out.size() && i < first.size(); ++i)
      worst_output = std::max(worst_output, std::abs(out[i] - first[i]));
  }
  const bool ok = worst_grad <= kDdpTolerance && worst_output <= kDdpTolerance;
  char line[320];
  std::snprintf(line, sizeof line,
                "# DDP check: Linear(42,3)+ReLU+log_softmax (float64) on %d rank(s): same output on every rank "
                "(max spread %.3g), gradients = those of the mean loss over all ranks' inputs (max |diff| %.3g, "
                "bound %.0e): %s",
                n, worst_output, worst_grad, kDdpTolerance, ok ? "OK" : "FAILED");
  return {line, ok};
}

int hello(const ddpw::Options& options, const ddp::LaunchEnv& launch, const ddp::EnvMap& env) {
  using Clock = std::chrono::steady_clock;
  if (!launch.warning.empty())
    std::fprintf(stderr, "[RANK %d] warning: %s\n", launch.global_rank, launch.warning.c_str());

  // Checks a rank can make alone, before any collective. choose_device binds the GPU (before
  // NCCL starts); whether ranks share one is judged below, from every rank's report.
  const torch::Device device = ddp::choose_device(options.device, launch.local_rank);
  // choose_device stopped already if LibTorch has no kernels for this GPU or the driver is too old;
  // the line says which kernels serve it and which CUDA versions met.
  const std::string cuda_support = device.is_cuda() ? ddp::check_cuda_support(device.index()).summary : "";
  // Fewer ranks than GPUs works, so it is a warning (once per node), not an error. An explicit
  // --device cuda:N chooses its GPUs on purpose.
  if (device.is_cuda() && options.device.rfind("cuda:", 0) != 0 && launch.local_rank == 0) {
    const std::string idle = diagnostics::idle_gpus_warning(launch.local_world_size, ddp::visible_gpus());
    if (!idle.empty()) std::fprintf(stderr, "[RANK %d] warning: %s\n", launch.global_rank, idle.c_str());
  }
  ddp::ProcessGroupOptions group_options = ddpw::process_group_options(options);
  group_options.join_backend = false;  // report first, through the store alone
  if (!launch.init_method.empty())
    diagnostics::check_init_file(launch.init_method);
  else if (launch.global_rank != 0)  // rank 0 serves the rendezvous: it may not listen yet
    diagnostics::wait_for_master(launch, group_options.rendezvous_timeout);
  else if (!env.count("TORCHELASTIC_USE_AGENT_STORE"))  // under torchrun, torchrun serves it
    diagnostics::check_master_is_here(launch);

  auto start = Clock::now();
  const auto group = ddp::init_process_group(launch, device, group_options);
  const double rendezvous_s = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<Report> reports;
  for (const auto& text : group->all_gather_strings(encode(my_report(launch, device, env))))
    reports.push_back(decode(text));
  const Problems problems = launch_problems(reports, launch.world_size, group->backend_name());

  const bool rank0 = launch.global_rank == 0;
  if (rank0) {
    std::printf("# hello: %s\n", ddp::describe(launch).c_str());
    std::printf("# backend %s, LibTorch %s, all ranks met at the rendezvous in %.2f s\n", group->backend_name().c_str(),
                DDPW_TORCH_VERSION, rendezvous_s);
    if (!cuda_support.empty()) std::printf("# CUDA support (rank 0): %s\n", cuda_support.c_str());
    print_table(reports);
    print_comm_variables(reports);
    if (!problems.note.empty()) std::printf("# note: %s\n", problems.note.c_str());
    for (const auto& p : problems.failed) std::printf("# FAILED: %s\n", p.c_str());
    std::fflush(stdout);
  }
  bool ok = problems.failed.empty();
  if (ok) {  // a launch that is wrong would only fail again, less clearly, in the backend
    start = Clock::now();
    group->join_backend();
    const double join_s = std::chrono::duration<double>(Clock::now() - start).count();
    const DdpCheck check = ddp_check(group, device);
    ok = check.ok;
    if (rank0)
      std::printf("# joined the %s backend in %.2f s\n%s\n", group->backend_name().c_str(), join_s, check.line.c_str());
  }
  if (rank0) {
    std::printf("%s: %zu of %d ranks reported\n", ok ? "OK" : "FAILED", reports.size(), launch.world_size);
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  const ddpw::Options options = ddpw::parse_options(
      argc, argv, "Checks a distributed launch: every rank reports host, rank, device and NCCL settings",
      ddpw::kDistributedOptions, [](CLI::App& app, ddpw::Options& o) {
        app.add_option("--device", o.device, "auto (CUDA if available, else CPU), cpu, cuda or cuda:N");
      });
  const ddp::EnvMap env = ddp::current_environment();

  ddp::LaunchEnv launch;
  if (int rc = ddpw::run_main(
          [&] {
            launch = ddp::resolve_launch_env(env, ddpw::launch_overrides(options));
            return 0;
          },
          "[hello]"))
    return rc;

  return ddpw::run_main([&] { return hello(options, launch, env); },
                        "[RANK " + std::to_string(launch.global_rank) + " on " + ddp::host_name() + "]");
}
