// allreduce_check — NCSA Delta's DistributedReduceAll, measured like nccl-tests' all_reduce_perf.
// Each rank fills a buffer with a pattern that depends on its rank and the element's index, the
// ranks sum the buffers in place (all-reduce), and every rank compares the result with the
// closed-form sum. A sweep of sizes prints time and bandwidth; a copy of the largest buffer on the
// same device gives the local memory bandwidth to compare with. Exit 0 only when nothing was wrong.
//
//   mpirun -np 2 build/bin/allreduce_check --max-bytes 16M
//   torchrun --standalone --nproc_per_node=4 --no-python build/bin/allreduce_check
#include <unistd.h>

#include <CLI/CLI.hpp>  // defines: CLI::App (the sweep's own options)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ddp/device.h"         // defines: choose_device, choose_threads, device_name
#include "ddp/error.h"          // defines: ddp::Error, DDP_CHECK, run_main
#include "ddp/launch_env.h"     // defines: resolve_launch_env, describe
#include "ddp/options.h"        // defines: parse_options, launch_overrides
#include "ddp/process_group.h"  // defines: ProcessGroup
#include "ddp/run_report.h"     // defines: host_name

#ifdef DDPW_HAVE_CUDA
#include <cuda_runtime_api.h>  // defines: cudaRuntimeGetVersion
#endif
#ifdef DDPW_HAVE_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>  // defines: c10d::getNcclVersion
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Sweep {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ull << 20;
  int factor = 2;
  int iters = 20;
  int warmup = 5;
};

// min, min*factor, ... up to max (nccl-tests' -b/-e/-f).
std::vector<uint64_t> sizes_of(const Sweep& sweep) {
  std::vector<uint64_t> sizes{sweep.min_bytes};
  while (sizes.back() <= sweep.max_bytes / sweep.factor) sizes.push_back(sizes.back() * sweep.factor);
  return sizes;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, v == static_cast<int64_t>(v) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// Rank r holds  i % period + r  at index i, so the sum over n ranks is  n * (i % period) + n(n-1)/2.
// Both are whole numbers below 2^24, which float32 adds exactly in any order: a correct all-reduce
// matches to the bit, and a lost, doubled or shifted piece of any rank's buffer does not.
class Pattern {
 public:
  explicit Pattern(int world) : world_(world) {
    const int64_t exact = int64_t{1} << 24, offset = int64_t{world} * (world - 1) / 2;
    DDP_CHECK(offset < exact, "the check's pattern is exact for up to 5000 ranks, not " + std::to_string(world),
              "run the check on fewer ranks");
    period_ = std::min<int64_t>(4093, (exact - offset) / world);
  }
  torch::Tensor mine(int64_t count, int rank, const torch::Device& device) const {
    return index_pattern(count, device).add_(rank);
  }
  torch::Tensor sum(int64_t count, const torch::Device& device) const {
    return index_pattern(count, device).mul_(world_).add_(int64_t{world_} * (world_ - 1) / 2);
  }

 private:
  torch::Tensor index_pattern(int64_t count, const torch::Device& device) const {
    auto i = torch::arange(count, torch::TensorOptions().dtype(torch::kInt32).device(device));
    return i.remainder_(period_).to(torch::kFloat32);
  }
  int world_;
  int64_t period_ = 1;
};

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());  // NCCL and copies run on a stream
}

// Seconds per call of `op`, the mean over `iters` calls after `warmup` untimed ones.
template <typename Op>
double time_per_call(const torch::Device& device, int warmup, int iters, Op op) {
  for (int i = 0; i < warmup; ++i) op();
  synchronize(device);
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) op();
  synchronize(device);
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

struct Result {
  double seconds;  // slowest rank's mean time per all-reduce
  int64_t wrong;   // wrong elements, all ranks together
};

Result measure(ddp::ProcessGroup& group, const Pattern& pattern, const torch::Device& device, uint64_t bytes,
               const Sweep& sweep) {
  const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
  const std::string what = "all-reduce of " + human_bytes(bytes);

  torch::Tensor buffer = pattern.mine(count, group.rank(), device);
  group.allreduce_sum(buffer, what);
  int64_t wrong = buffer.ne(pattern.sum(count, device)).sum().item<int64_t>();

  // Timed on zeros: the sums cannot overflow however many iterations, and must stay zero.
  buffer.zero_();
  group.barrier("barrier before timing the " + what);
  const double seconds = time_per_call(device, sweep.warmup, sweep.iters, [&] { group.allreduce_sum(buffer, what); });
  wrong += buffer.ne(0).sum().item<int64_t>();

  // One small all-reduce aggregates: slot r holds rank r's time (max taken after), the last the errors.
  auto stats = torch::zeros({group.size() + 1}, torch::kFloat64);
  stats[group.rank()] = seconds;
  stats[group.size()] = static_cast<double>(wrong);
  auto on_device = stats.to(device);
  group.allreduce_sum(on_device, "all-reduce of the timings of the " + what);
  stats = on_device.cpu();
  return {stats.slice(0, 0, group.size()).max().item<double>(), static_cast<int64_t>(stats[group.size()].item<double>())};
}

// Bytes per second of a copy of `bytes` on the device, every rank at the same time (as in the
// all-reduce, the ranks of a node share its memory): the slowest rank's figure.
double copy_bandwidth(ddp::ProcessGroup& group, const torch::Device& device, uint64_t bytes, const Sweep& sweep) {
  const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
  auto source = torch::ones({count}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  auto target = torch::empty_like(source);
  group.barrier("barrier before timing the copy");
  const double seconds = time_per_call(device, std::max(sweep.warmup, 1), sweep.iters, [&] { target.copy_(source); });
  auto times = torch::zeros({group.size()}, torch::kFloat64);
  times[group.rank()] = seconds;
  auto on_device = times.to(device);
  group.allreduce_sum(on_device, "all-reduce of the copy timings");
  return static_cast<double>(bytes) / on_device.cpu().max().item<double>();
}

std::string versions(const ddp::ProcessGroup& group, [[maybe_unused]] const torch::Device& device) {
  std::string v = std::string("LibTorch ") + DDPW_TORCH_VERSION + ", backend " + group.backend_name();
#ifdef DDPW_HAVE_CUDA
  int runtime = 0;
  if (device.is_cuda() && cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    v += ", CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
#endif
#ifdef DDPW_HAVE_NCCL
  if (group.backend_name() == "nccl") v += ", NCCL " + c10d::getNcclVersion();
#endif
  return v;
}

int allreduce_check(const ddp::Options& options, const Sweep& sweep, const ddp::LaunchEnv& launch) {
  const torch::Device device = ddp::choose_device(options.device, launch.local_rank, launch.local_world_size);
  const int threads = ddp::choose_threads(0, launch.local_world_size);
  torch::set_num_threads(threads);
  ddp::ProcessGroup group(launch, device, ddp::process_group_options(options));
  const bool rank0 = group.rank() == 0;
  const int n = group.size();
  const Pattern pattern(n);
  const std::vector<uint64_t> sizes = sizes_of(sweep);

  char line[256];
  std::snprintf(line, sizeof line, "#  Rank %3d Pid %7d on %s device %s (%d CPU thread%s)", group.rank(),
                static_cast<int>(::getpid()), ddp::host_name().c_str(), ddp::device_name(device).c_str(), threads,
                threads == 1 ? "" : "s");
  const auto rank_lines = group.all_gather_strings(line);
  if (rank0) {
    std::printf("# allreduce_check: in-place all-reduce (sum) of float32 buffers, checked against the closed-form sum\n");
    std::printf("# %s\n# %s\n", ddp::describe(launch).c_str(), versions(group, device).c_str());
    std::printf("# %zu sizes, %s to %s (x%d); per size %d untimed warm-up and %d timed all-reduces\n",
                sizes.size(), human_bytes(sizes.front()).c_str(), human_bytes(sizes.back()).c_str(), sweep.factor,
                sweep.warmup, sweep.iters);
    std::printf("# time = mean per all-reduce, slowest rank; algbw = size / time; busbw = algbw * 2(n-1)/n, n = %d\n#\n", n);
    for (const auto& l : rank_lines) std::printf("%s\n", l.c_str());
    std::printf("#\n#%11s  %12s  %8s  %6s  %10s  %7s  %7s  %7s\n", "size", "count", "type", "redop", "time", "algbw",
                "busbw", "#wrong");
    std::printf("#%11s  %12s  %8s  %6s  %10s  %7s  %7s  %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  int64_t wrong_total = 0;
  double busbw_sum = 0;
  for (const uint64_t bytes : sizes) {
    const Result r = measure(group, pattern, device, bytes, sweep);
    const double algbw = static_cast<double>(bytes) / r.seconds / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    wrong_total += r.wrong;
    busbw_sum += busbw;
    if (rank0) {
      std::printf(" %11llu  %12llu  %8s  %6s  %10.2f  %7.3f  %7.3f  %7lld\n", static_cast<unsigned long long>(bytes),
                  static_cast<unsigned long long>(bytes / sizeof(float)), "float", "sum", r.seconds * 1e6, algbw,
                  busbw, static_cast<long long>(r.wrong));
      std::fflush(stdout);  // a hang shows at which size
    }
  }

  const double copy = copy_bandwidth(group, device, sizes.back(), sweep);
  const bool ok = wrong_total == 0;
  if (rank0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total), ok ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / sizes.size());
    std::printf("# memcpy bandwidth     : %.3f GB/s (copy of %s on %s, all ranks at once, slowest rank; "
                "each byte read once and written once)\n",
                copy / 1e9, human_bytes(sizes.back()).c_str(), device.str().c_str());
    std::printf("%s\n", ok ? "OK" : "FAILED");
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  Sweep sweep;
  const ddp::Options options = ddp::parse_options(
      argc, argv, "All-reduce check and bandwidth sweep (nccl-tests style): every rank verifies the sum",
      ddp::kDistributedOptions, [&sweep](CLI::App& app, ddp::Options& o) {
        app.add_option("--device", o.device, "auto (CUDA if available, else CPU), cpu, cuda or cuda:N");
        const auto size = CLI::AsSizeValue(false);  // 4K, 16M, 1G: powers of 1024
        app.add_option("--min-bytes", sweep.min_bytes, "Smallest buffer in bytes (e.g. 8, 4K, 1M)")->transform(size);
        app.add_option("--max-bytes", sweep.max_bytes, "Largest buffer in bytes (e.g. 64M, 1G)")->transform(size);
        app.add_option("--factor", sweep.factor, "Each size is the previous one times this")->check(CLI::Range(2, 1024));
        app.add_option("--iters", sweep.iters, "Timed all-reduces per size")->check(CLI::Range(1, 1000000));
        app.add_option("--warmup", sweep.warmup, "Untimed all-reduces per size, before the timed ones")
            ->check(CLI::Range(0, 1000000));
        app.final_callback([&sweep] {
          if (sweep.min_bytes < 4 || sweep.min_bytes % 4 != 0 || sweep.max_bytes % 4 != 0)
            throw CLI::ValidationError("--min-bytes/--max-bytes", "sizes must be whole float32 elements: multiples of 4 B");
          if (sweep.min_bytes > sweep.max_bytes)
            throw CLI::ValidationError("--min-bytes", "is larger than --max-bytes");
          if (sweep.max_bytes > (4ull << 30))
            throw CLI::ValidationError("--max-bytes", "at most 4G");
        });
      });

  ddp::LaunchEnv launch;
  const ddp::EnvMap env = ddp::current_environment();
  if (int rc = ddp::run_main([&] { launch = ddp::resolve_launch_env(env, ddp::launch_overrides(options)); return 0; },
                             "[allreduce_check]"))
    return rc;
  return ddp::run_main([&] { return allreduce_check(options, sweep, launch); },
                       "[RANK " + std::to_string(launch.global_rank) + " on " + ddp::host_name() + "]");
}
