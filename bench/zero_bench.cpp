// zero_bench: what ZeRO saves per rank, and what it costs per step, next to plain DDP, launched like
// step 2 (torchrun / mpirun / srun). bench/zero_memory runs it for N = 1, 2, 3 ranks and every
// strategy and writes the table of bench/results/zero-memory-*.md.
//
//   torchrun --standalone --nproc_per_node=2 --no-python build/bin/zero_bench --strategy zero2
//
// Workload (per rank): bench::Mlp (10 x Linear(1024,1024)+ReLU + Linear(1024,10), 10.5 M float32
// parameters), batch 32 of random inputs, cross-entropy, AdamW.
// --strategy ddp:   ddp::DistributedDataParallel + LibTorch's torch::optim::AdamW (full state per rank)
// --strategy zero1: ddp::ZeroDataParallel stage 1 + ddp::ShardedAdamW (1/N of the state per rank)
// --strategy zero2: stage 2 (and 1/N of the gradients)
// Printed per run: bytes held per rank, measured from the tensors: parameters, gradients kept
// between backward and step, optimizer state; the peak resident memory (VmHWM) of every rank, and
// its growth from before the model was built; the median step time (the slowest rank's).
// --collectives-mib N: instead of training, the time of ZeRO's collectives on an N MiB buffer:
// allreduce, c10d's _reduce_scatter_base, ddp::ReduceScatter (Gloo: alltoall + sum) and the
// all-gather, so the choice of reduce-scatter on Gloo is measured, not assumed.
// The final OK/FAILED line checks that all ranks end with identical parameters and a finite loss.
#include <torch/torch.h>  // defines: tensors, nn, optim

#include <CLI/CLI.hpp>  // defines: the command line

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "course/run_main.h"                 // defines: run_main, exit codes (error.h)
#include "ddp/config.h"                      // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/detail/sharded_collectives.h"  // defines: ReduceScatter, all_gather_slices
#include "ddp/device.h"                      // defines: choose_device
#include "ddp/distributed_data_parallel.h"   // defines: DistributedDataParallel (the baseline)
#include "ddp/launch_env.h"                  // defines: resolve_launch_env (torchrun, mpirun, srun)
#include "ddp/process_group.h"               // defines: ProcessGroup (Gloo / NCCL)
#include "ddp/sharded_adamw.h"               // defines: ShardedAdamW
#include "ddp/zero_data_parallel.h"          // defines: ZeroDataParallel
#include "measure.h"                         // defines: resident_memory, median, gather, bytes_of
#include "mlp.h"                             // defines: bench::Mlp

namespace {

using bench::bytes_of;
using bench::gather;
using bench::median;
using bench::resident_memory;

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string strategy = "zero2";
  int64_t width = 1024;
  int layers = 10;
  int batch_size = 32;
  int64_t samples = 256;
  int warmup = 3;
  int steps = 20;
  double bucket_mb = 25;
  int threads = 1;
  std::string device = "auto";
  std::string backend = "auto";
  double timeout_s = 300;
  bool no_header = false;
  double collectives_mib = 0;
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{
      "ZeRO-1/2 against DDP: bytes and peak memory per rank, step time; launch with torchrun, mpirun "
      "or srun",
      "zero_bench"};
  app.option_defaults()->always_capture_default();
  app.add_option("--strategy", o.strategy, "ddp, zero1 or zero2")->check(CLI::IsMember({"ddp", "zero1", "zero2"}));
  app.add_option("--width", o.width, "MLP width")->check(CLI::Range(int64_t{8}, int64_t{16384}));
  app.add_option("--layers", o.layers, "MLP hidden layers")->check(CLI::Range(1, 1000));
  app.add_option("--batch-size", o.batch_size, "Samples per step per rank")->check(CLI::Range(1, 1 << 20));
  app.add_option("--samples", o.samples, "Random samples in memory")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::Range(0, 1 << 20));
  app.add_option("--steps", o.steps, "Timed steps")->check(CLI::Range(1, 1 << 20));
  app.add_option("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB (every strategy)")
      ->check(CLI::Range(0.001, 4096.0));
  app.add_option("--threads", o.threads, "Intra-op threads per rank")->check(CLI::Range(1, 1024));
  app.add_option("--device", o.device, "auto, cpu, cuda or cuda:N");
  app.add_option("--backend", o.backend, "auto, gloo or nccl")->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app.add_option("--timeout", o.timeout_s, "Seconds before a rendezvous or collective is declared hung")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_flag("--no-header", o.no_header, "Print only the result row (bench/zero_memory joins runs)");
  app.add_option("--collectives-mib", o.collectives_mib, "Time ZeRO's collectives on a buffer this size instead")
      ->check(CLI::Range(0.001, 65536.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "zero_bench: error: %s (fix: see zero_bench --help)\n", e.what());
    std::exit(ddp::kExitUsage);
  }
  return o;
}

void sync_device(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

constexpr double kMiB = 1024.0 * 1024.0;

int train_bench(const BenchOptions& o, ddp::ProcessGroup& pg, const torch::Device& device) {
  const int rank = pg.rank(), world = pg.size();
  const int64_t rss_before = resident_memory().first;                         // LibTorch and the group, no model yet
  std::shared_ptr<ddp::ProcessGroup> pg_ref(&pg, [](ddp::ProcessGroup*) {});  // not owned
  torch::manual_seed(0);
  auto model = std::make_shared<bench::Mlp>(o.width, o.layers);
  model->to(device);
  auto inputs = torch::rand({o.samples, o.width}, device);
  auto targets = torch::randint(0, 10, {o.samples}, torch::TensorOptions(torch::kLong).device(device));

  std::unique_ptr<ddp::DistributedDataParallel<bench::Mlp>> ddp_model;
  std::unique_ptr<torch::optim::AdamW> adamw;
  std::unique_ptr<ddp::ZeroDataParallel<bench::Mlp>> zero_model;
  std::unique_ptr<ddp::ShardedAdamW> sharded;
  if (o.strategy == "ddp") {
    ddp::DdpOptions options;
    options.bucket_mb = o.bucket_mb;
    ddp_model = std::make_unique<ddp::DistributedDataParallel<bench::Mlp>>(model, pg_ref, options);
    adamw =
        std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
  } else {
    ddp::ZeroOptions options;
    options.stage = o.strategy == "zero1" ? 1 : 2;
    options.bucket_mb = o.bucket_mb;
    zero_model = std::make_unique<ddp::ZeroDataParallel<bench::Mlp>>(model, pg_ref, options);
    sharded = std::make_unique<ddp::ShardedAdamW>(*zero_model, ddp::AdamOptions{1e-4, 0.9, 0.999, 1e-8, 0.01, true});
  }

  std::vector<double> times;
  double last_loss = NAN;
  const int64_t per_step = static_cast<int64_t>(o.batch_size) * world;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const int64_t start = (step * per_step + rank * o.batch_size) % std::max<int64_t>(1, o.samples - o.batch_size);
    const auto x = inputs.narrow(0, start, o.batch_size), y = targets.narrow(0, start, o.batch_size);
    const auto t0 = Clock::now();
    if (adamw)
      adamw->zero_grad();
    else
      sharded->zero_grad();
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    loss.backward();  // DDP/ZeRO-1: bucketed allreduce; ZeRO-2: bucketed reduce-scatter
    if (adamw)
      adamw->step();
    else
      sharded->step();  // ZeRO: my slice, then the all-gather
    sync_device(device);
    if (step >= o.warmup) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (step == o.warmup + o.steps - 1) last_loss = loss.item<double>();
  }
  // The slowest rank sets each step's time.
  auto slowest = torch::tensor(times, torch::kFloat64).to(device);
  {
    std::vector<torch::Tensor> t{slowest};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    pg.wait(pg.backend().allreduce(t, max), "allreduce of the step times");
  }
  const auto step_times = slowest.cpu();
  const double step_ms =
      median(std::vector<double>(step_times.data_ptr<double>(), step_times.data_ptr<double>() + times.size())) * 1e3;

  // Bytes held per rank between steps, from the tensors themselves.
  int64_t param_bytes = 0, grad_bytes = 0, state_bytes = 0;
  for (const auto& p : model->parameters()) param_bytes += bytes_of(p);
  if (adamw) {
    for (const auto& p : model->parameters()) grad_bytes += bytes_of(p.grad());  // views of the buckets
    for (const auto& [key, state] : adamw->state()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
      state_bytes += bytes_of(s.exp_avg()) + bytes_of(s.exp_avg_sq()) + bytes_of(s.max_exp_avg_sq());
    }
  } else {
    for (const auto& b : zero_model->reducer()->buckets()) grad_bytes += bytes_of(b.grads) + bytes_of(b.grad_shard);
    state_bytes = sharded->state_bytes();
  }
  const auto [rss_now, rss_peak] = resident_memory();
  (void)rss_now;
  const auto peaks = gather(pg, static_cast<double>(rss_peak));
  const auto growths = gather(pg, static_cast<double>(rss_peak - rss_before));
  const auto states = gather(pg, static_cast<double>(state_bytes));
  const auto grads = gather(pg, static_cast<double>(grad_bytes));

  // Correctness: data parallelism keeps every rank's parameters identical.
  double sum = 0;
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : model->parameters()) sum += p.detach().to(torch::kCPU, torch::kFloat64).sum().item<double>();
  }
  const auto sums = gather(pg, sum);
  const bool same = std::all_of(sums.begin(), sums.end(), [&](double s) { return s == sums[0]; });
  const bool ok = same && std::isfinite(last_loss);

  if (rank == 0) {
    int64_t numel = 0;
    for (const auto& p : model->parameters()) numel += p.numel();
    if (!o.no_header) {
      std::printf("# zero_bench: LibTorch %s, backend %s, device %s, %d thread(s) per rank\n", DDPW_TORCH_VERSION,
                  pg.backend_name().c_str(), device.str().c_str(), o.threads);
      std::printf(
          "# mlp %d x %lld wide, %lld parameters, batch %d per rank, AdamW, buckets %.2f MiB; %d warm-up + %d "
          "timed steps; bytes per rank measured from the tensors (max over ranks); peak RSS = VmHWM\n",
          o.layers, static_cast<long long>(o.width), static_cast<long long>(numel), o.batch_size, o.bucket_mb, o.warmup,
          o.steps);
      std::printf(
          "#\n# ranks strategy  params   grads  optimizer  peak RSS  RSS growth  step median   peak RSS per rank\n");
      std::printf("#                   (MiB)   (MiB)  state(MiB)  (MiB,max)  (MiB,max)       (ms)          (MiB)\n");
    }
    std::string per_rank;
    for (double p : peaks) per_rank += (per_rank.empty() ? "" : "/") + std::to_string(static_cast<int64_t>(p / kMiB));
    std::printf("%7d %8s %7.1f %7.1f %10.1f %9.0f %11.0f %12.2f   %s\n", world, o.strategy.c_str(), param_bytes / kMiB,
                *std::max_element(grads.begin(), grads.end()) / kMiB,
                *std::max_element(states.begin(), states.end()) / kMiB,
                *std::max_element(peaks.begin(), peaks.end()) / kMiB,
                *std::max_element(growths.begin(), growths.end()) / kMiB, step_ms, per_rank.c_str());
    if (ok)
      std::printf("# OK (parameters identical on all ranks, final loss %.4g)\n", last_loss);
    else
      std::printf("# FAILED: %s\n", same ? "the loss is not finite" : "parameters differ between ranks");
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

// ZeRO's collectives on one buffer: what reduce-scatter costs on this backend, each way.
int collectives_bench(const BenchOptions& o, ddp::ProcessGroup& pg, const torch::Device& device) {
  const int64_t n = pg.size();
  const int64_t count = std::max<int64_t>(n, static_cast<int64_t>(o.collectives_mib * kMiB / 4) / n * n);
  auto buffer = torch::rand({count}, device);
  auto out = torch::empty({count / n}, buffer.options());
  auto time_it = [&](const std::function<void()>& f) {
    std::vector<double> t;
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      pg.barrier("between timed collectives");
      const auto t0 = Clock::now();
      f();
      sync_device(device);
      if (i >= o.warmup) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return median(t) * 1e3;
  };
  const double allreduce = time_it([&] { pg.allreduce_sum(buffer, "allreduce"); });
  double rs_base = NAN;
  if (n > 1)
    rs_base = time_it([&] {
      c10d::ReduceScatterOptions opts;
      pg.wait(pg.backend()._reduce_scatter_base(out, buffer, opts), "_reduce_scatter_base");
    });
  const double rs_ours = time_it([&] { ddp::ReduceScatter(pg, buffer, out, false).finish("ddp::ReduceScatter"); });
  std::vector<torch::Tensor> flats{buffer};
  const double gather_ms = time_it([&] { ddp::all_gather_slices(pg, flats, "all_gather_slices"); });
  if (pg.rank() == 0) {
    if (!o.no_header)
      std::printf(
          "# ranks backend  MiB  allreduce(ms)  _reduce_scatter_base(ms)  ddp::ReduceScatter(ms)  all-gather(ms)\n");
    std::printf("%7lld %7s %5.1f %14.2f %25.2f %23.2f %15.2f\n", static_cast<long long>(n), pg.backend_name().c_str(),
                count * 4 / kMiB, allreduce, rs_base, rs_ours, gather_ms);
    std::fflush(stdout);
  }
  return ddp::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  const BenchOptions o = parse(argc, argv);
  const char* rank = std::getenv("RANK");
  return ddpw::run_main(
      [&] {
        const auto launch = ddp::resolve_launch_env(ddp::current_environment());
        if (!launch.warning.empty()) std::fprintf(stderr, "warning: %s\n", launch.warning.c_str());
        torch::set_num_threads(o.threads);
        const torch::Device device = ddp::choose_device(o.device, launch.local_rank);
        ddp::ProcessGroupOptions pg_options;
        pg_options.backend = o.backend;
        pg_options.rendezvous_timeout = pg_options.collective_timeout =
            std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
        auto pg = ddp::init_process_group(launch, device, pg_options);
        return o.collectives_mib > 0 ? collectives_bench(o, *pg, device) : train_bench(o, *pg, device);
      },
      std::string("[zero_bench rank ") + (rank ? rank : "?") + "]");
}
