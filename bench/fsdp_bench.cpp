// fsdp_bench: what fully sharded data parallel (ddp::FullyShardedDataParallel) holds per rank and
// costs per step, next to DDP and ZeRO-2, launched like step 2 (torchrun / mpirun / srun).
// bench/fsdp_memory runs it for N = 1, 2, 4 ranks and every strategy, with Python's fully_shard
// (bench/python_fsdp.py) beside it, and writes bench/results/fsdp-*.md and its plot.
//
//   torchrun --standalone --nproc_per_node=2 --no-python build/bin/fsdp_bench --strategy fsdp
//
// Workload (per rank): a transformer-shaped stack: Linear(width, width) in, `layers` residual blocks
// of LayerNorm + Linear(width, 4 width) + GELU + Linear(4 width, width), LayerNorm + Linear(width,
// 10) out; input [batch, seq, width] of random numbers, cross-entropy per position, AdamW.
// --strategy ddp:       ddp::DistributedDataParallel + ddp::adam_step on the full parameters
// --strategy zero2:     ddp::ZeroDataParallel stage 2 + ddp::ShardedAdamW
// --strategy fsdp:      ddp::FullyShardedDataParallel (one unit per block) + ddp::FullyShardedAdamW
// --strategy fsdp-ckpt: the same with activation checkpointing
// Printed per run: bytes held per rank between steps, measured from the tensors (parameters,
// gradients, optimizer state); for FSDP the largest gathered unit; the peak resident memory (VmHWM)
// and its growth from before the model was built; the median step time (the slowest rank's).
// The final OK/FAILED line checks a finite loss and, for the replicated strategies, identical
// parameters on all ranks (FSDP: the gathered state_dict's checksum, the same on every rank).
// --phases: FSDP's memory per rank, phase by phase, for a model built on the host and wrapped with
// FullyShardedOptions::device: building it, wrapping it, --steps training steps (forward, backward,
// ShardedAdamW step), full_state_dict(), ddp::save_sharded_snapshot (into --snapshot-dir). One row per
// rank and phase: the peak over what the rank held when the phase began, from LibTorch's host
// allocations counted exactly (tests/host_allocations.h) and from the resident set (VmHWM, reset
// before each phase through /proc/self/clear_refs, minus VmRSS at the phase's start), and what the
// rank holds after it, above what it held before the model was built (between steps: after a step).
#include <torch/torch.h>  // defines: tensors, nn

#include <CLI/CLI.hpp>  // defines: the command line

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <sys/stat.h>  // defines: mkdir

#include "../tests/host_allocations.h"      // defines: HostAllocations (LibTorch's host allocations, counted)
#include "course/run_main.h"                // defines: run_main, exit codes (error.h)
#include "ddp/config.h"                     // defines: DDPW_TORCH_VERSION
#include "ddp/device.h"                     // defines: choose_device
#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel (the baseline)
#include "ddp/files.h"                      // defines: remove_tree
#include "ddp/fully_sharded.h"              // defines: FullyShardedDataParallel, FullyShardedAdamW
#include "ddp/launch_env.h"                 // defines: resolve_launch_env
#include "ddp/module_call.h"                // defines: ddp::call, the blocks' call site
#include "ddp/process_group.h"              // defines: ProcessGroup
#include "ddp/sharded_adamw.h"              // defines: ShardedAdamW
#include "ddp/zero_data_parallel.h"         // defines: ZeroDataParallel
#include "measure.h"                        // defines: resident_memory, median, gather, bytes_of

namespace {

using bench::bytes_of;
using bench::gather;
using bench::median;
using bench::resident_memory;

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t d) {
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    fc = register_module("fc", torch::nn::Linear(d, 4 * d));
    proj = register_module("proj", torch::nn::Linear(4 * d, d));
  }
  torch::Tensor forward(torch::Tensor x) { return x + proj(torch::gelu(fc(ln(x)))); }
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear fc{nullptr}, proj{nullptr};
};
TORCH_MODULE(Block);

struct StackImpl : torch::nn::Module {
  StackImpl(int64_t d, int layers) {
    in = register_module("in", torch::nn::Linear(d, d));
    for (int i = 0; i < layers; ++i) blocks.push_back(register_module("blocks" + std::to_string(i), Block(d)));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    head = register_module("head", torch::nn::Linear(d, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto h = in(x);
    for (auto& b : blocks) h = ddp::call(b, h);
    return head(ln_f(h));
  }
  torch::nn::Linear in{nullptr}, head{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};

struct BenchOptions {
  std::string strategy = "fsdp";
  int64_t width = 256;
  int layers = 8;
  int batch_size = 8;
  int64_t seq = 64;
  int warmup = 2;
  int steps = 8;
  int threads = 1;
  std::string device = "auto";
  double timeout_s = 300;
  bool no_header = false;
  bool phases = false;
  std::string snapshot_dir = "/tmp/fsdp_bench_phases";
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"FSDP against DDP and ZeRO-2: bytes and peak memory per rank, step time; launch with torchrun",
               "fsdp_bench"};
  app.option_defaults()->always_capture_default();
  app.add_option("--strategy", o.strategy, "ddp, zero2, fsdp or fsdp-ckpt")
      ->check(CLI::IsMember({"ddp", "zero2", "fsdp", "fsdp-ckpt"}));
  app.add_option("--width", o.width, "Model width")->check(CLI::Range(int64_t{8}, int64_t{16384}));
  app.add_option("--layers", o.layers, "Blocks")->check(CLI::Range(1, 1000));
  app.add_option("--batch-size", o.batch_size, "Sequences per step per rank")->check(CLI::Range(1, 1 << 20));
  app.add_option("--seq", o.seq, "Positions per sequence")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::Range(0, 1 << 20));
  app.add_option("--steps", o.steps, "Timed steps")->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", o.threads, "Intra-op threads per rank")->check(CLI::Range(1, 1024));
  app.add_option("--device", o.device, "auto, cpu, cuda or cuda:N");
  app.add_option("--timeout", o.timeout_s, "Seconds before a rendezvous or collective is declared hung")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_flag("--no-header", o.no_header, "Print only the result row (bench/fsdp_memory joins runs)");
  app.add_flag("--phases", o.phases,
               "FSDP's memory per rank and phase (build on the host, wrap, --steps steps, full_state_dict, save); "
               "--warmup and --strategy are not used");
  app.add_option("--snapshot-dir", o.snapshot_dir,
                 "--phases: folder for the sharded snapshot (shared by the ranks; removed afterwards)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fsdp_bench: error: %s (fix: see fsdp_bench --help)\n", e.what());
    std::exit(ddp::kExitUsage);
  }
  return o;
}

int run(const BenchOptions& o, ddp::ProcessGroup& pg, const torch::Device& device) {
  const int rank = pg.rank(), world = pg.size();
  const int64_t rss_before = resident_memory().first;
  std::shared_ptr<ddp::ProcessGroup> pg_ref(&pg, [](ddp::ProcessGroup*) {});  // not owned
  torch::manual_seed(0);
  auto model = std::make_shared<StackImpl>(o.width, o.layers);
  model->to(device);
  int64_t numel = 0;
  for (const auto& p : model->parameters()) numel += p.numel();
  const ddp::AdamOptions adam{.lr = 1e-4, .weight_decay = 0.01};

  std::unique_ptr<ddp::DistributedDataParallel<StackImpl>> ddp_model;
  std::vector<torch::Tensor> moments_m, moments_v;
  std::unique_ptr<ddp::ZeroDataParallel<StackImpl>> zero_model;
  std::unique_ptr<ddp::ShardedAdamW> sharded;
  std::unique_ptr<ddp::FullyShardedDataParallel<StackImpl>> fsdp_model;
  std::unique_ptr<ddp::FullyShardedAdamW> fsdp_adam;
  if (o.strategy == "ddp") {
    ddp_model = std::make_unique<ddp::DistributedDataParallel<StackImpl>>(model, pg_ref);
    for (const auto& p : model->parameters()) {
      moments_m.push_back(torch::zeros_like(p));
      moments_v.push_back(torch::zeros_like(p));
    }
  } else if (o.strategy == "zero2") {
    ddp::ZeroOptions options;
    options.stage = 2;
    zero_model = std::make_unique<ddp::ZeroDataParallel<StackImpl>>(model, pg_ref, options);
    sharded = std::make_unique<ddp::ShardedAdamW>(*zero_model, adam);
  } else {
    ddp::FullyShardedOptions options;
    options.checkpoint_activations = o.strategy == "fsdp-ckpt";
    std::vector<std::shared_ptr<torch::nn::Module>> units;
    for (auto& b : model->blocks) units.push_back(b.ptr());
    fsdp_model = std::make_unique<ddp::FullyShardedDataParallel<StackImpl>>(model, units, pg_ref, options);
    fsdp_adam = std::make_unique<ddp::FullyShardedAdamW>(*fsdp_model, adam);
  }

  std::vector<double> times;
  double last_loss = NAN;
  int64_t step_count = 0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    auto gen = at::detail::createCPUGenerator(1000 * step + rank);
    const auto x = torch::randn({o.batch_size, o.seq, o.width}, gen).to(device);
    const auto y = torch::randint(0, 10, {o.batch_size * o.seq}, gen).to(device);
    const auto t0 = Clock::now();
    torch::Tensor loss;
    if (ddp_model) {
      for (auto& p : model->parameters()) p.mutable_grad().reset();
      loss = torch::cross_entropy_loss((*ddp_model)(x).view({-1, 10}), y);
      loss.backward();
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> params, grads;
      for (auto& p : model->parameters()) {
        params.push_back(p.detach());
        grads.push_back(p.grad());
      }
      ddp::adam_step(params, grads, moments_m, moments_v, ++step_count, adam);
    } else if (zero_model) {
      sharded->zero_grad();
      loss = torch::cross_entropy_loss((*zero_model)(x).view({-1, 10}), y);
      loss.backward();
      sharded->step();
    } else {
      fsdp_adam->zero_grad();
      loss = torch::cross_entropy_loss((*fsdp_model)(x).view({-1, 10}), y);
      loss.backward();
      fsdp_adam->step();
    }
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
    if (step >= o.warmup) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (step == o.warmup + o.steps - 1) last_loss = loss.item<double>();
  }
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

  // Bytes held per rank between steps, from the tensors.
  int64_t param_bytes = 0, grad_bytes = 0, state_bytes = 0, largest_unit = 0;
  if (ddp_model) {
    for (const auto& p : model->parameters()) {
      param_bytes += bytes_of(p);
      grad_bytes += bytes_of(p.grad());
    }
    for (size_t i = 0; i < moments_m.size(); ++i) state_bytes += bytes_of(moments_m[i]) + bytes_of(moments_v[i]);
  } else if (zero_model) {
    for (const auto& p : model->parameters()) param_bytes += bytes_of(p);
    for (const auto& b : zero_model->reducer()->buckets()) grad_bytes += bytes_of(b.grads) + bytes_of(b.grad_shard);
    state_bytes = sharded->state_bytes();
  } else {
    for (const auto& s : fsdp_model->parameters()) {
      param_bytes += bytes_of(s);
      grad_bytes += bytes_of(s.grad());
    }
    param_bytes += fsdp_model->engine()->gathered_bytes();  // 0 between steps
    state_bytes = fsdp_adam->state_bytes();
    for (const auto& u : fsdp_model->engine()->units()) largest_unit = std::max(largest_unit, u.padded_numel * 4);
  }
  const int64_t rss_peak = resident_memory().second;
  const auto peaks = gather(pg, static_cast<double>(rss_peak));
  const auto growths = gather(pg, static_cast<double>(rss_peak - rss_before));
  const auto totals = gather(pg, static_cast<double>(param_bytes + grad_bytes + state_bytes));

  // Correctness: every rank ends with the same model.
  double sum = 0;
  if (fsdp_model) {
    const auto full = fsdp_model->full_state_dict();  // rank 0 only: broadcast its checksum below
    for (const auto& [name, t] : full) sum += t.to(torch::kFloat64).sum().item<double>();
  } else {
    torch::NoGradGuard no_grad;
    for (const auto& p : model->parameters()) sum += p.detach().to(torch::kCPU, torch::kFloat64).sum().item<double>();
  }
  const auto sums = gather(pg, sum);
  const bool same = fsdp_model || std::all_of(sums.begin(), sums.end(), [&](double s) { return s == sums[0]; });
  const bool ok = same && std::isfinite(last_loss) && std::isfinite(sums[0]);

  if (rank == 0) {
    if (!o.no_header) {
      std::printf("# fsdp_bench: LibTorch %s, backend %s, device %s, %d thread(s) per rank\n", DDPW_TORCH_VERSION,
                  pg.backend_name().c_str(), device.str().c_str(), o.threads);
      std::printf(
          "# stack of %d blocks, width %lld, %lld parameters (%.1f MiB float32), batch %d x %lld positions per rank, "
          "AdamW; %d warm-up + %d timed steps; bytes per rank from the tensors (max over ranks); peak RSS = VmHWM\n",
          o.layers, static_cast<long long>(o.width), static_cast<long long>(numel), numel * 4 / kMiB, o.batch_size,
          static_cast<long long>(o.seq), o.warmup, o.steps);
      std::printf("# ranks  strategy  params+grads+state  largest unit  peak RSS  RSS growth  step median\n");
      std::printf("#                              (MiB)         (MiB) (MiB,max)   (MiB,max)         (ms)\n");
    }
    std::printf("%7d %9s %19.2f %13.2f %9.0f %11.0f %12.1f\n", world, o.strategy.c_str(),
                *std::max_element(totals.begin(), totals.end()) / kMiB, largest_unit / kMiB,
                *std::max_element(peaks.begin(), peaks.end()) / kMiB,
                *std::max_element(growths.begin(), growths.end()) / kMiB, step_ms);
    if (ok)
      std::printf("# OK (final loss %.4g)\n", last_loss);
    else
      std::printf("# FAILED: %s\n", same ? "the loss is not finite" : "parameters differ between ranks");
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

// --phases: what one rank holds, phase by phase (see the file's header).
struct PhaseRow {
  double start_alloc, peak_alloc, end_alloc, start_rss, peak_rss, end_rss;  // bytes
};

class PhaseMeter {
 public:
  PhaseMeter(ddp_test::HostAllocations& host, ddp::ProcessGroup& pg, int64_t largest_unit)
      : host_(host),
        pg_(pg),
        largest_unit_(largest_unit),
        base_alloc_(host.current()),
        base_rss_(resident_memory().first) {}
  void set_largest_unit(int64_t bytes) { largest_unit_ = bytes; }

  void begin() {
    std::ofstream clear("/proc/self/clear_refs");  // "5": VmHWM back to VmRSS (Linux >= 4.0)
    clear << "5" << std::flush;
    if (!clear)
      throw ddp::Error("fsdp_bench --phases: cannot write /proc/self/clear_refs to reset the peak resident set",
                       "run on Linux 4.0 or later with /proc mounted");
    host_.reset_peak();
    alloc0_ = host_.current();
    rss0_ = resident_memory().first;
  }
  // Ends the phase on every rank (a collective: the rows are gathered) and prints rank 0's table rows.
  void end(const std::string& phase) {
    const auto [rss, hwm] = resident_memory();
    const PhaseRow mine{static_cast<double>(alloc0_ - base_alloc_),
                        static_cast<double>(host_.peak() - alloc0_),
                        static_cast<double>(host_.current() - base_alloc_),
                        static_cast<double>(rss0_ - base_rss_),
                        static_cast<double>(hwm - rss0_),
                        static_cast<double>(rss - base_rss_)};
    std::vector<std::vector<double>> all;
    for (double v : {mine.start_alloc, mine.peak_alloc, mine.end_alloc, mine.start_rss, mine.peak_rss, mine.end_rss})
      all.push_back(gather(pg_, v));
    if (pg_.rank() != 0) return;
    for (int r = 0; r < pg_.size(); ++r)
      std::printf("%5d %5d %-16s %9.1f %9.1f %9.1f %9.1f %6.2f %9.1f %9.1f\n", pg_.size(), r, phase.c_str(),
                  all[0][r] / kMiB, all[3][r] / kMiB, all[1][r] / kMiB, all[4][r] / kMiB,
                  largest_unit_ > 0 ? all[1][r] / static_cast<double>(largest_unit_) : 0.0, all[2][r] / kMiB,
                  all[5][r] / kMiB);
    std::fflush(stdout);
  }

 private:
  ddp_test::HostAllocations& host_;
  ddp::ProcessGroup& pg_;
  int64_t largest_unit_;
  int64_t base_alloc_, base_rss_;
  int64_t alloc0_ = 0, rss0_ = 0;
};

int run_phases(const BenchOptions& o, ddp::ProcessGroup& pg, const torch::Device& device,
               ddp_test::HostAllocations& host) {
  const int rank = pg.rank(), world = pg.size();
  std::shared_ptr<ddp::ProcessGroup> pg_ref(&pg, [](ddp::ProcessGroup*) {});  // not owned
  // A block's bytes: the 'units' column of the build row (later rows: the largest unit, as wrapped).
  const int64_t block_numel = 2 * o.width + (o.width * 4 * o.width + 4 * o.width) + (4 * o.width * o.width + o.width);
  if (rank == 0 && !o.no_header) {
    std::printf("# fsdp_bench --phases: LibTorch %s, backend %s, device %s, %d thread(s) per rank\n",
                DDPW_TORCH_VERSION, pg.backend_name().c_str(), device.str().c_str(), o.threads);
    std::printf("# built on the host, wrapped with FullyShardedOptions::device = %s, one unit per block; AdamW\n",
                device.str().c_str());
  }
  PhaseMeter meter(host, pg, block_numel * 4);

  meter.begin();
  torch::manual_seed(0);
  auto model = std::make_shared<StackImpl>(o.width, o.layers);  // on the host
  meter.end("build");
  int64_t numel = 0;
  for (const auto& p : model->parameters()) numel += p.numel();

  std::vector<std::shared_ptr<torch::nn::Module>> units;
  for (auto& b : model->blocks) units.push_back(b.ptr());
  ddp::FullyShardedOptions options;
  options.device = device;
  meter.begin();
  auto fsdp = std::make_unique<ddp::FullyShardedDataParallel<StackImpl>>(model, units, pg_ref, options);
  meter.end("wrap");
  int64_t largest_unit = 0, shard_bytes = 0;
  for (const auto& u : fsdp->engine()->units()) largest_unit = std::max(largest_unit, u.padded_numel * 4);
  for (const auto& s : fsdp->parameters()) shard_bytes += bytes_of(s);
  meter.set_largest_unit(largest_unit);
  if (rank == 0 && !o.no_header) {
    std::printf(
        "# stack of %d blocks, width %lld: %lld parameters, %.1f MiB float32; %zu units, the largest %.2f MiB; "
        "shards %.2f MiB per rank; batch %d x %lld positions per rank\n",
        o.layers, static_cast<long long>(o.width), static_cast<long long>(numel), numel * 4 / kMiB,
        fsdp->engine()->units().size(), largest_unit / kMiB, shard_bytes / kMiB, o.batch_size,
        static_cast<long long>(o.seq));
    std::printf(
        "# alloc = LibTorch's host allocations, counted exactly; RSS = resident set (VmRSS; its peak VmHWM, "
        "reset at each phase's start); held = above what the rank held before the model was built\n");
    std::printf("# ranks  rank phase             held before         peak over before      held after\n");
    std::printf("#                               alloc       RSS     alloc       RSS  units     alloc       RSS\n");
    std::printf("#                               (MiB)     (MiB)     (MiB)     (MiB)    (x)     (MiB)     (MiB)\n");
  }

  const ddp::AdamOptions adam{.lr = 1e-4, .weight_decay = 0.01};
  meter.begin();
  ddp::FullyShardedAdamW optimizer(*fsdp, adam);  // = ddp::ShardedAdamW
  meter.end("adamw (create)");
  double last_loss = NAN;
  for (int step = 0; step < o.steps; ++step) {
    auto gen = at::detail::createCPUGenerator(1000 * step + rank);
    const auto x = torch::randn({o.batch_size, o.seq, o.width}, gen).to(device);
    const auto y = torch::randint(0, 10, {o.batch_size * o.seq}, gen).to(device);
    meter.begin();
    optimizer.zero_grad();
    {
      auto loss = torch::cross_entropy_loss((*fsdp)(x).view({-1, 10}), y);
      loss.backward();
      optimizer.step();
      last_loss = loss.item<double>();
    }
    meter.end("step " + std::to_string(step + 1));
  }

  meter.begin();
  double sum = 0;
  {
    auto full = fsdp->full_state_dict();  // rank 0: the whole model in host memory; others: empty
    meter.end("full_state_dict");
    for (const auto& [name, t] : full) sum += t.to(torch::kFloat64).sum().item<double>();
  }

  // (ddp/files.h, not std::filesystem: LibTorch's own copy of it can be the one resolved, and crash)
  const std::string dir = o.snapshot_dir;
  if (rank == 0) {
    ddp::remove_tree(dir);
    if (::mkdir(dir.c_str(), 0755) != 0)
      throw ddp::Error("fsdp_bench --phases: cannot create " + dir, "pass another --snapshot-dir");
  }
  pg.barrier("--phases: the snapshot folder");
  meter.begin();
  ddp::save_fully_sharded_snapshot(dir + "/fsdp.json", optimizer,  // = ddp::save_sharded_snapshot
                                   {.epochs_run = 0, .step_in_epoch = o.steps, .world_size = world});
  meter.end("save");
  pg.barrier("--phases: the snapshot written");
  if (rank == 0) ddp::remove_tree(dir);

  const bool ok = std::isfinite(last_loss) && std::isfinite(sum);
  if (rank == 0) {
    if (ok)
      std::printf("# OK (final loss %.4g)\n", last_loss);
    else
      std::printf("# FAILED: the loss or the gathered weights are not finite\n");
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  const BenchOptions o = parse(argc, argv);
  // --phases: every host allocation from here on counted, before the model is built.
  ddp_test::HostAllocations* host = o.phases ? &ddp_test::HostAllocations::install() : nullptr;
  const char* rank = std::getenv("RANK");
  return ddpw::run_main(
      [&] {
        const auto launch = ddp::resolve_launch_env(ddp::current_environment());
        if (!launch.warning.empty()) std::fprintf(stderr, "warning: %s\n", launch.warning.c_str());
        torch::set_num_threads(o.threads);
        const torch::Device device = ddp::choose_device(o.device, launch.local_rank);
        ddp::ProcessGroupOptions pg_options;
        pg_options.rendezvous_timeout = pg_options.collective_timeout =
            std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
        auto pg = ddp::init_process_group(launch, device, pg_options);
        return host ? run_phases(o, *pg, device, *host) : run(o, *pg, device);
      },
      std::string("[fsdp_bench rank ") + (rank ? rank : "?") + "]");
}
