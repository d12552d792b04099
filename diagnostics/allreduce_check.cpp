// allreduce_check — NCSA Delta's DistributedReduceAll, measured like nccl-tests' all_reduce_perf.
// Each rank fills a buffer with a pattern that depends on its rank and the element's index, the
// ranks sum the buffers in place (all-reduce), and every rank compares the result with the
// closed-form sum. A sweep of sizes prints time and bandwidth; a copy of the largest buffer on the
// same device gives the local memory bandwidth to compare with. Exit 0 only when nothing was wrong.
// Timing: on the CPU the host clock; on GPUs with NCCL each all-reduce's own duration on NCCL's
// stream (CUDA events, TORCH_NCCL_ENABLE_TIMING=1), like nccl-tests' device time; the header says
// which.
//
//   mpirun -np 2 build/bin/allreduce_check --max-bytes 16M
//   torchrun --standalone --nproc_per_node=4 --no-python build/bin/allreduce_check
#include <unistd.h>

#include <CLI/CLI.hpp>  // defines: CLI::App (the sweep's own options)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "course/from_options.h"            // defines: process_group_options
#include "course/options.h"                 // defines: parse_options, launch_overrides
#include "course/run_main.h"                // defines: run_main
#include "ddp/config.h"                     // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/device.h"                     // defines: choose_device, device_name
#include "ddp/host.h"                       // defines: host_name
#include "ddp/launch_env.h"                 // defines: resolve_launch_env, describe
#include "ddp/process_group.h"              // defines: ProcessGroup
#include "ddp/threads.h"                    // defines: choose_threads
#include "diagnostics/allreduce_pattern.h"  // defines: AllreducePattern

#ifdef DDPW_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>             // defines: at::cuda::CUDAEvent (timing on the GPU)
#include <ATen/detail/CUDAHooksInterface.h>  // defines: getCUDAHooks().versionCUDART (torch's runtime)
#include <cuda_runtime_api.h>                // defines: cudaDriverGetVersion
#endif
#ifdef DDPW_HAVE_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // NCCLUtils.hpp is guarded by it; not every LibTorch exports it
#endif
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

// How an all-reduce is timed on this rank's device and backend (the same on every rank).
enum class Timing { kHostClock, kNcclDuration, kCudaEvents };

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  return v && (std::string(v) == "1" || std::string(v) == "true" || std::string(v) == "True");
}

Timing timing_for(const ddp::ProcessGroup& group) {
  if (!group.device().is_cuda()) return Timing::kHostClock;
  if (group.backend_name() == "nccl" && (env_true("TORCH_NCCL_ENABLE_TIMING") || env_true("NCCL_ENABLE_TIMING")))
    return Timing::kNcclDuration;
  return Timing::kCudaEvents;
}

std::string describe(Timing timing) {
  switch (timing) {
    case Timing::kHostClock: return "host clock around the all-reduces (Gloo on the CPU runs them one by one)";
    case Timing::kNcclDuration:
      return "NCCL's own duration of each all-reduce: CUDA events around its kernel on NCCL's stream "
             "(TORCH_NCCL_ENABLE_TIMING=1), as nccl-tests' device time; c10d's host cost of queueing is not in it";
    case Timing::kCudaEvents:
      return "CUDA events on the stream around the queued all-reduces (TORCH_NCCL_ENABLE_TIMING is off: small "
             "sizes then include c10d's host cost of queueing)";
  }
  return "";
}

// Seconds per all-reduce of `buffer`, the mean over `iters`, timed as `timing` says. Gloo runs them
// one by one. On a GPU they queue back to back on NCCL's stream, as in nccl-tests: the start event
// precedes the first all-reduce on this rank's stream, the end event follows the last one (wait()
// makes the stream wait for it); with NCCL's timing on, each work's own start and end events on
// NCCL's stream give its duration, which excludes the gaps where the GPU waited for the host.
double time_allreduce(ddp::ProcessGroup& group, torch::Tensor& buffer, int iters, Timing timing,
                      const std::string& what) {
  std::vector<torch::Tensor> tensors{buffer};
  if (timing == Timing::kHostClock) {
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) group.allreduce_sum(buffer, what);
    return std::chrono::duration<double>(Clock::now() - start).count() / iters;
  }
#ifdef DDPW_HAVE_CUDA
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);  // with timing
  start.record();
  std::vector<c10::intrusive_ptr<c10d::Work>> queued;
  for (int i = 0; i < iters; ++i) queued.push_back(group.allreduce_sum_async(tensors));
  for (auto& work : queued) group.wait(work, what);  // the stream waits; failures throw
  end.record();
  group.wait_on_host(queued.back(), what);  // the host waits, bounded by the collective timeout
  end.synchronize();
  if (timing == Timing::kCudaEvents) return static_cast<double>(start.elapsed_time(end)) / 1000.0 / iters;
  double milliseconds = 0;
  for (auto& work : queued) milliseconds += work->getDuration();  // all complete: the last one is
  return milliseconds / 1000.0 / iters;
#else
  (void)iters;
  throw ddp::Error("a CUDA buffer in a build without CUDA");
#endif
}

// Seconds per copy of `source` into `target` on their device, the mean over `iters` (a GPU's
// copies timed with CUDA events, the CPU's with the host clock).
double time_copy(torch::Tensor& target, const torch::Tensor& source, int iters) {
  target.copy_(source);  // warm-up: first touch of the pages, kernel load
#ifdef DDPW_HAVE_CUDA
  if (source.is_cuda()) {
    at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
    start.record();
    for (int i = 0; i < iters; ++i) target.copy_(source);
    end.record();
    end.synchronize();
    return static_cast<double>(start.elapsed_time(end)) / 1000.0 / iters;
  }
#endif
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) target.copy_(source);
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

// The largest `value` over all ranks (the group only sums: each rank fills its own slot).
double max_over_ranks(ddp::ProcessGroup& group, const torch::Device& device, double value) {
  auto slots = torch::zeros({group.size()}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  slots[group.rank()] = value;
  group.allreduce_sum(slots, "all-reduce of the timings");
  return slots.max().item<double>();
}

int64_t sum_over_ranks(ddp::ProcessGroup& group, const torch::Device& device, int64_t value) {
  auto sum = torch::full({1}, value, torch::TensorOptions().dtype(torch::kInt64).device(device));
  group.allreduce_sum(sum, "all-reduce of the error counts");
  return sum.item<int64_t>();
}

struct Result {
  double seconds;  // slowest rank's mean time per all-reduce
  int64_t wrong;   // wrong elements, all ranks together
};

Result measure(ddp::ProcessGroup& group, const diagnostics::AllreducePattern& pattern, const torch::Device& device,
               uint64_t bytes, const Sweep& sweep, Timing timing) {
  const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
  const std::string what = "all-reduce of " + human_bytes(bytes);

  torch::Tensor buffer = pattern.mine(count, group.rank(), device);
  group.allreduce_sum(buffer, what);
  int64_t wrong = pattern.wrong(buffer);

  // Timed on zeros: the sums cannot overflow however many iterations, and must stay zero.
  buffer.zero_();
  if (sweep.warmup > 0) time_allreduce(group, buffer, sweep.warmup, timing, what);
  group.barrier("barrier before timing the " + what);
  const double seconds = time_allreduce(group, buffer, sweep.iters, timing, what);
  wrong += buffer.ne(0).sum().item<int64_t>();

  return {max_over_ranks(group, device, seconds), sum_over_ranks(group, device, wrong)};
}

// Bytes per second of a copy of `bytes` on the device, every rank at the same time (as in the
// all-reduce, the ranks of a node share its memory): the slowest rank's figure.
double copy_bandwidth(ddp::ProcessGroup& group, const torch::Device& device, uint64_t bytes, int iters) {
  const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
  auto source = torch::ones({count}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  auto target = torch::empty_like(source);
  group.barrier("barrier before timing the copy");
  return static_cast<double>(bytes) / max_over_ranks(group, device, time_copy(target, source, iters));
}

std::string versions(const ddp::ProcessGroup& group, [[maybe_unused]] const torch::Device& device) {
  std::string v = std::string("LibTorch ") + DDPW_TORCH_VERSION + ", backend " + group.backend_name();
#ifdef DDPW_HAVE_CUDA
  // The runtime torch was built with and loads (not whichever cudart this program linked too).
  if (device.is_cuda()) {
    const long runtime = at::detail::getCUDAHooks().versionCUDART();
    v += ", CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + " (torch's)";
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess)
      v += ", driver supports CUDA " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  }
#endif
#ifdef DDPW_HAVE_NCCL
  if (group.backend_name() == "nccl") v += ", NCCL " + c10d::getNcclVersion();
#endif
  return v;
}

int allreduce_check(const ddpw::Options& options, const Sweep& sweep, const ddp::LaunchEnv& launch) {
  const torch::Device device = ddp::choose_device(options.device, launch.local_rank);
  const int threads = ddp::choose_threads(0, launch.local_world_size);
  torch::set_num_threads(threads);
  const ddp::ProcessGroupOptions group_options = ddpw::process_group_options(options);
  ddp::ProcessGroup group(launch, device, group_options);
  const bool rank0 = group.rank() == 0;
  const int n = group.size();
  const diagnostics::AllreducePattern pattern(n);
  const Timing timing = timing_for(group);
  const std::vector<uint64_t> sizes = sizes_of(sweep);

  char line[256];
  std::snprintf(line, sizeof line, "#  Rank %3d Pid %7d on %s device %s (%d CPU thread%s)", group.rank(),
                static_cast<int>(::getpid()), ddp::host_name().c_str(), ddp::device_name(device).c_str(), threads,
                threads == 1 ? "" : "s");
  const auto rank_lines = group.all_gather_strings(line);
  if (rank0) {
    std::printf(
        "# allreduce_check: in-place all-reduce (sum) of float32 buffers, checked against the closed-form sum\n");
    std::printf("# %s\n# %s\n", ddp::describe(launch).c_str(), versions(group, device).c_str());
    std::printf("# %zu sizes, %s to %s (x%d); per size %d untimed warm-up and %d timed all-reduces\n", sizes.size(),
                human_bytes(sizes.front()).c_str(), human_bytes(sizes.back()).c_str(), sweep.factor, sweep.warmup,
                sweep.iters);
    std::printf("# time = mean per all-reduce, slowest rank; algbw = size / time; busbw = algbw * 2(n-1)/n, n = %d\n",
                n);
    std::printf("# timing: %s\n#\n", describe(timing).c_str());
    for (const auto& l : rank_lines) std::printf("%s\n", l.c_str());
    std::printf("#\n#%11s  %12s  %8s  %6s  %10s  %7s  %7s  %7s\n", "size", "count", "type", "redop", "time", "algbw",
                "busbw", "#wrong");
    std::printf("#%11s  %12s  %8s  %6s  %10s  %7s  %7s  %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)",
                "");
    std::fflush(stdout);
  }

  int64_t wrong_total = 0;
  double busbw_sum = 0;
  for (const uint64_t bytes : sizes) {
    const Result r = measure(group, pattern, device, bytes, sweep, timing);
    const double algbw = static_cast<double>(bytes) / r.seconds / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    wrong_total += r.wrong;
    busbw_sum += busbw;
    if (rank0) {
      std::printf(" %11llu  %12llu  %8s  %6s  %10.2f  %7.3f  %7.3f  %7lld\n", static_cast<unsigned long long>(bytes),
                  static_cast<unsigned long long>(bytes / sizeof(float)), "float", "sum", r.seconds * 1e6, algbw, busbw,
                  static_cast<long long>(r.wrong));
      std::fflush(stdout);  // a hang shows at which size
    }
  }

  const double copy = copy_bandwidth(group, device, sizes.back(), sweep.iters);
  const bool ok = wrong_total == 0;
  if (rank0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total), ok ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / sizes.size());
    std::printf(
        "# memcpy bandwidth     : %.3f GB/s (copy of %s on %s, all ranks at once, slowest rank; "
        "each byte read once and written once; %s)\n",
        copy / 1e9, human_bytes(sizes.back()).c_str(), device.str().c_str(),
        device.is_cuda() ? "CUDA events" : "host clock");
    std::printf("%s\n", ok ? "OK" : "FAILED");
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  Sweep sweep;
  const ddpw::Options options = ddpw::parse_options(
      argc, argv, "All-reduce check and bandwidth sweep (nccl-tests style): every rank verifies the sum",
      ddpw::kDistributedOptions, [&sweep](CLI::App& app, ddpw::Options& o) {
        app.add_option("--device", o.device, "auto (CUDA if available, else CPU), cpu, cuda or cuda:N");
        const auto size = CLI::AsSizeValue(false);  // 4K, 16M, 1G: powers of 1024
        app.add_option("--min-bytes", sweep.min_bytes, "Smallest buffer in bytes (e.g. 8, 4K, 1M)")->transform(size);
        app.add_option("--max-bytes", sweep.max_bytes, "Largest buffer in bytes (e.g. 64M, 1G)")->transform(size);
        app.add_option("--factor", sweep.factor, "Each size is the previous one times this")
            ->check(CLI::Range(2, 1024));
        app.add_option("--iters", sweep.iters, "Timed all-reduces per size")->check(CLI::Range(1, 1000000));
        app.add_option("--warmup", sweep.warmup, "Untimed all-reduces per size, before the timed ones")
            ->check(CLI::Range(0, 1000000));
        app.final_callback([&sweep] {
          if (sweep.min_bytes < 4 || sweep.min_bytes % 4 != 0 || sweep.max_bytes % 4 != 0)
            throw CLI::ValidationError("--min-bytes/--max-bytes",
                                       "sizes must be whole float32 elements: multiples of 4 B");
          if (sweep.min_bytes > sweep.max_bytes)
            throw CLI::ValidationError("--min-bytes", "is larger than --max-bytes");
          if (sweep.max_bytes > (4ull << 30)) throw CLI::ValidationError("--max-bytes", "at most 4G");
        });
      });

  // NCCL times each all-reduce on its own stream when asked before the group exists: the
  // device-side duration this program reports (unless the environment says otherwise).
  ::setenv("TORCH_NCCL_ENABLE_TIMING", "1", /*overwrite=*/0);
  ddp::LaunchEnv launch;
  const ddp::EnvMap env = ddp::current_environment();
  if (int rc = ddpw::run_main(
          [&] {
            launch = ddp::resolve_launch_env(env, ddpw::launch_overrides(options));
            return 0;
          },
          "[allreduce_check]"))
    return rc;
  return ddpw::run_main([&] { return allreduce_check(options, sweep, launch); },
                        "[RANK " + std::to_string(launch.global_rank) + " on " + ddp::host_name() + "]");
}
