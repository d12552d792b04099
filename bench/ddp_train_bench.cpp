// ddp_train_bench: how long one data-parallel training step takes, launched like step 2
// (torchrun / mpirun / srun). Rank 0 prints an nccl-tests-like table; bench/python_ddp.py prints
// the same table for torch.nn.parallel.DistributedDataParallel, and bench/compare runs both.
//
//   torchrun --standalone --nproc_per_node=2 --no-python build/bin/ddp_train_bench --workload cnn
//
// Workloads (per rank):
//   synthetic  Linear(20,1) on 2048x20 samples, batch 32, SGD lr 1e-2, MSE (overhead-bound)
//   cnn        ddpw::MnistCnn, batch 64, ddp::Adadelta lr 1.0, NLL, random [N,1,28,28] images
//              (or --dataset fashion-mnist)
//   mlp        10 x (Linear(1024,1024)+ReLU) + Linear(1024,10) = 10.5 M parameters, batch 32,
//              SGD lr 1e-2, cross-entropy: enough gradient to show what overlapping buys
// --mode overlapped: ddp::DistributedDataParallel (bucketed allreduce during backward).
// --mode naive: no hooks; after backward, allreduce every gradient (launch all, wait all, divide
//   by the world size), as pytorch/examples' cpp/distributed does.
// --mode local: no gradient exchange at all (each rank trains alone on its shard): the baseline
//   that says what the machine gives N ranks that do not communicate, and so what DDP costs.
// --precision bf16|fp16: mixed precision as the course's --precision (course/workload.h): the forward
//   and the loss under autocast, float32 parameters and optimizer state; fp16 also scales the loss
//   (ddp::GradScaler attached to the optimizer: unscale, skip on inf/NaN, update, on the device).
// --cuda-graph (CUDA): the step captured once in a CUDA graph after 3 eager warm-up steps and replayed
//   (ddp::CudaGraphStep): one launch per step; with --mode local, the replay without communication.
// --allreduce-bytes N: instead of training, the allreduce bus bandwidth of an N-byte buffer next
//   to rank 0's memcpy bandwidth (on a GPU: a device-to-device copy of the same size).
// A timed step = cut the batch, zero_grad, forward, loss, backward, (naive: allreduce), optimizer
// step. Each step's time is the slowest rank's; the table shows the median. The final OK/FAILED
// line checks that all ranks ended with identical parameters and a finite loss (exit code 1 if not).
// Like-for-like with bench/python_ddp.py on a GPU: batches cut on the device, multi-tensor
// (foreach) optimizers, gradients as bucket views, cudnn.benchmark and TF32 set the same way,
// steps timed with CUDA events (no synchronization inside a step), and the host synchronizations
// inside the timed steps counted with CUDA's sync debug mode.
#include <sys/resource.h>
#include <torch/torch.h>  // defines: tensors, nn, optim

#include <CLI/CLI.hpp>  // defines: the command line

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "course/idx.h"                     // defines: load_idx_dataset (Fashion-MNIST)
#include "course/models.h"                  // defines: Model, LinearRegressor, MnistCnn
#include "course/run_main.h"                // defines: run_main; Error, exit codes (error.h)
#include "course/sync_counter.h"            // defines: SyncCounter (host synchronizations per step)
#include "course/workload.h"                // defines: MixedPrecision, attach_grad_scaler (--precision)
#include "ddp/adadelta.h"                   // defines: Adadelta (the CNN's optimizer)
#include "ddp/config.h"                     // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/cuda_graph_step.h"            // defines: CudaGraphStep (--cuda-graph)
#include "ddp/data.h"                       // defines: Dataset, DistributedSampler, Loader
#include "ddp/device.h"                     // defines: choose_device, device_name
#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel (overlapped mode)
#include "ddp/host.h"                       // defines: host_name
#include "ddp/launch_env.h"                 // defines: resolve_launch_env (torchrun, mpirun, srun)
#include "ddp/process_group.h"              // defines: ProcessGroup (Gloo / NCCL)
#include "ddp/sgd.h"                        // defines: Sgd (multi-tensor on GPUs, as torch.optim.SGD)
#include "mlp.h"                            // defines: bench::Mlp (the mlp workload)

#ifdef DDPW_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>  // defines: CUDAEvent (step timing on a GPU)
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string workload = "synthetic";  // synthetic | cnn | mlp
  std::string mode = "overlapped";     // overlapped | naive | local
  std::string dataset = "random";      // cnn: random | fashion-mnist
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t samples = 4096;  // random cnn/mlp samples held in memory
  int batch_size = 0;      // per rank; 0: the workload's default
  int threads = 1;
  int warmup = 10;
  int steps = 100;
  double bucket_mb = 25;
  std::string device = "auto";
  std::string backend = "auto";
  uint64_t seed = 0;
  double timeout_s = 300;
  bool no_header = false;
  int64_t allreduce_bytes = 0;     // > 0: measure bandwidth instead of training
  std::string tf32 = "off";        // CUDA: TF32 for matmul and cuDNN (python_ddp.py sets the same)
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (autocast; fp16 with the GradScaler)
  bool cuda_graph = false;         // the step captured once in a CUDA graph and replayed (ddp::CudaGraphStep)
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"Time a data-parallel training step (C++ DDP); launch with torchrun, mpirun or srun", "ddp_train_bench"};
  app.option_defaults()->always_capture_default();
  app.add_option("--workload", o.workload, "synthetic, cnn or mlp (see the source's header)")
      ->check(CLI::IsMember({"synthetic", "cnn", "mlp"}));
  app.add_option("--mode", o.mode,
                 "overlapped (our DistributedDataParallel), naive (allreduce after backward) or local (no "
                 "gradient exchange: the baseline of ranks that do not communicate)")
      ->check(CLI::IsMember({"overlapped", "naive", "local"}));
  app.add_option("--dataset", o.dataset, "cnn only: random images or the Fashion-MNIST training set")
      ->check(CLI::IsMember({"random", "fashion-mnist"}));
  app.add_option("--data-dir", o.data_dir, "Folder with the Fashion-MNIST IDX files");
  app.add_option("--samples", o.samples, "Random cnn/mlp samples in memory")->check(CLI::Range(1, 1 << 24));
  app.add_option("--batch-size", o.batch_size, "Samples per step per rank (0: the workload's default)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--threads", o.threads, "Intra-op threads per rank (torch::set_num_threads)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::Range(0, 1 << 24));
  app.add_option("--steps", o.steps, "Timed steps")->check(CLI::Range(1, 1 << 24));
  app.add_option("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB (overlapped mode)")
      ->check(CLI::Range(0.001, 4096.0));
  app.add_option("--device", o.device, "auto, cpu, cuda or cuda:N");
  app.add_option("--backend", o.backend, "auto, gloo or nccl")->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app.add_option("--seed", o.seed, "Seed for data and weights");
  app.add_option("--timeout", o.timeout_s, "Seconds before a rendezvous or collective is declared hung")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_flag("--no-header", o.no_header, "Print only the result row (bench/compare joins runs)");
  app.add_flag("--cuda-graph", o.cuda_graph,
               "CUDA: capture the step (forward, backward, DDP's allreduces, Adadelta) once after 3 warm-up steps and "
               "replay it (modes overlapped and local; cnn; needs --warmup 4 or more)");
  app.add_option("--allreduce-bytes", o.allreduce_bytes,
                 "Measure allreduce bus bandwidth of a buffer this size (and memcpy) instead of training")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  app.add_option("--tf32", o.tf32, "CUDA: TensorFloat-32 in matmuls and convolutions (cudnn.benchmark stays off)")
      ->check(CLI::IsMember({"off", "on"}));
  app.add_option("--precision", o.precision,
                 "fp32, bf16 (autocast) or fp16 (autocast and ddp::GradScaler), as the course's --precision")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddp_train_bench: error: %s (fix: see ddp_train_bench --help)\n", e.what());
    std::exit(ddp::kExitUsage);
  }
  if (o.dataset != "random" && o.workload != "cnn") {
    std::fprintf(stderr, "ddp_train_bench: error: --dataset %s needs --workload cnn (fix: drop --dataset)\n",
                 o.dataset.c_str());
    std::exit(ddp::kExitUsage);
  }
  if (o.batch_size == 0) o.batch_size = o.workload == "cnn" ? 64 : 32;
  if (o.cuda_graph && (o.mode == "naive" || o.warmup < 4)) {
    std::fprintf(stderr,
                 "ddp_train_bench: error: --cuda-graph times replays: it needs --mode overlapped or local "
                 "and --warmup 4 or more (3 eager steps and the capture are not timed)\n");
    std::exit(2);
  }
  return o;
}

using Loss = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

struct Workload {
  ddp::Dataset data;
  std::shared_ptr<ddpw::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  Loss loss;
};

Workload make_workload(const BenchOptions& o, const torch::Device& device) {
  Workload w;
  torch::manual_seed(static_cast<int64_t>(o.seed));
  if (o.workload == "synthetic") {
    w.data = ddp::make_synthetic_dataset(2048, 20, o.seed);
    w.model = std::make_shared<ddpw::LinearRegressor>(20);
    w.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
  } else if (o.workload == "cnn") {
    if (o.dataset == "fashion-mnist") {
      w.data = ddpw::load_idx_dataset(o.data_dir, ddpw::Split::kTrain, 0.2860, 0.3530);
    } else {
      w.data.inputs = torch::rand({o.samples, 1, 28, 28});
      w.data.targets = torch::randint(0, 10, {o.samples}, torch::kLong);
    }
    w.model = std::make_shared<ddpw::MnistCnn>();
    w.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::nll_loss(out, y); };
  } else {
    w.data.inputs = torch::rand({o.samples, 1024});
    w.data.targets = torch::randint(0, 10, {o.samples}, torch::kLong);
    w.model = std::make_shared<bench::Mlp>();
    w.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::cross_entropy_loss(out, y); };
  }
  w.model->to(device);
  // --precision: the course's own mixed precision (autocast in the model's forward and the loss; fp16:
  // the loss's gradient scaled, the scaler attached to the optimizer).
  ddp::GradScalerOptions scaler;
  scaler.enabled = o.precision == "fp16";
  ddpw::MixedPrecision amp(o.precision, scaler);
  amp.apply_to(*w.model);
  w.loss = amp.wrap(w.loss);
  // Multi-tensor kernels on a GPU, one tensor at a time on the CPU: torch.optim's defaults.
  if (o.workload == "cnn")
    w.optimizer = std::make_unique<ddp::Adadelta>(w.model->parameters(), 1.0);
  else
    w.optimizer = std::make_unique<ddp::Sgd>(w.model->parameters(), torch::optim::SGDOptions(1e-2));
  ddpw::attach_grad_scaler(*w.optimizer, *w.model);
  return w;
}

// The approach of pytorch/examples cpp/distributed: every gradient allreduced after backward.
class NaiveAllreduce {
 public:
  NaiveAllreduce(ddpw::Model& model, ddp::ProcessGroup& pg) : params_(model.parameters()), pg_(pg) {
    torch::NoGradGuard no_grad;  // in-place writes into leaves that require grad
    for (auto& p : params_) {    // one at a time: Gloo's list form means one tensor per device
      std::vector<torch::Tensor> one{p};
      pg_.broadcast(one, 0, "initial parameters");
    }
  }
  void average_gradients() {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::vector<torch::Tensor>> grads(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      grads[i] = {params_[i].grad()};
      works.push_back(pg_.allreduce_sum_async(grads[i]));
    }
    for (auto& work : works) pg_.wait(work, "gradient allreduce");
    torch::NoGradGuard no_grad;
    for (auto& p : params_) p.grad().div_(pg_.size());
  }
  size_t allreduces_per_step() const { return params_.size(); }

 private:
  std::vector<torch::Tensor> params_;
  ddp::ProcessGroup& pg_;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      return pos == std::string::npos ? line : line.substr(pos + 2);
    }
  return "unknown";
}

std::string now_iso() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return buf;
}

void print_metadata(const BenchOptions& o, const ddp::LaunchEnv& launch, ddp::ProcessGroup& pg,
                    const torch::Device& device) {
  std::printf("# ddp_train_bench: LibTorch %s, g++ %s, C++ ddp::DistributedDataParallel\n", DDPW_TORCH_VERSION,
              __VERSION__);
  std::printf("# world size %d (%s), backend %s, device %s, threads %d per rank (torch::set_num_threads)\n", pg.size(),
              launch.launcher.c_str(), pg.backend_name().c_str(), ddp::device_name(device).c_str(), o.threads);
  std::printf("# machine: %s, %u cores, host %s\n", cpu_model().c_str(), std::thread::hardware_concurrency(),
              ddp::host_name().c_str());
  std::printf("# date: %s\n", now_iso().c_str());
}

// CPU seconds used so far by every thread of this process (user + system): unlike the wall
// clock, it does not grow when other programs compete for the cores.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Each element becomes the maximum over all ranks (the slowest rank sets a step's time).
void allreduce_max(ddp::ProcessGroup& pg, std::vector<double>& values, const torch::Device& device) {
  auto t = torch::tensor(values, torch::kFloat64).to(device);
  std::vector<torch::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  pg.wait(pg.backend().allreduce(tensors, opts), "allreduce of the step times");
  auto cpu = t.cpu();
  std::memcpy(values.data(), cpu.data_ptr<double>(), values.size() * sizeof(double));
}

void sync_device(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// cudnn.benchmark off and TF32 on or off for both matmuls and cuDNN: the settings python_ddp.py
// makes with torch.backends (the same switches of the same library), so neither side differs by
// a default.
void set_cuda_math(const BenchOptions& o) {
  at::globalContext().setBenchmarkCuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(o.tf32 == "on");
  at::globalContext().setAllowTF32CuDNN(o.tf32 == "on");
}

std::string cuda_math() {
  auto on_off = [](bool b) { return b ? "on" : "off"; };
  return std::string("cudnn.benchmark ") + on_off(at::globalContext().benchmarkCuDNN()) + ", TF32 matmul " +
         on_off(at::globalContext().allowTF32CuBLAS()) + ", TF32 cuDNN " + on_off(at::globalContext().allowTF32CuDNN());
}

// The timed steps' times. CPU: the host's steady clock around each step. GPU: CUDA events recorded
// on the current stream at the step's start, after its forward pass and at its end, read once all
// steps are done: nothing in a step waits for the GPU, and the GPU's time is measured (events are
// created before the loop: creating one inside a step would cost a driver call).
class StepTimes {
 public:
  StepTimes(const torch::Device& device, int steps) : cuda_(device.is_cuda()) {
    host_.resize(3 * static_cast<size_t>(steps));
#ifdef DDPW_HAVE_CUDA
    if (cuda_) {
      events_.reserve(3 * static_cast<size_t>(steps));
      for (int i = 0; i < 3 * steps; ++i) {
        events_.emplace_back(cudaEventDefault);  // with timing (the default disables it)
        events_.back().record();
      }
      sync_device(device);
    }
#endif
  }
  const char* method() const {
    return cuda_ ? "CUDA events on the current stream, read after the last step (no synchronization inside a step)"
                 : "the host's steady clock around each step";
  }
  void mark(int step, int which) {  // which: 0 start, 1 forward done, 2 end
    const size_t k = 3 * static_cast<size_t>(step) + static_cast<size_t>(which);
#ifdef DDPW_HAVE_CUDA
    if (cuda_) {
      events_[k].record();
      return;
    }
#endif
    host_[k] = Clock::now();
  }
  // Seconds per step (start to end) and per forward pass (start to forward done).
  void collect(std::vector<double>& steps, std::vector<double>& forwards) const {
    const size_t n = host_.size() / 3;
    steps.resize(n);
    forwards.resize(n);
    for (size_t i = 0; i < n; ++i) {
#ifdef DDPW_HAVE_CUDA
      if (cuda_) {
        events_[3 * i + 2].synchronize();  // after the loop: the timed steps are over
        steps[i] = 1e-3 * events_[3 * i].elapsed_time(events_[3 * i + 2]);
        forwards[i] = 1e-3 * events_[3 * i].elapsed_time(events_[3 * i + 1]);
        continue;
      }
#endif
      steps[i] = std::chrono::duration<double>(host_[3 * i + 2] - host_[3 * i]).count();
      forwards[i] = std::chrono::duration<double>(host_[3 * i + 1] - host_[3 * i]).count();
    }
  }

 private:
  bool cuda_;
  std::vector<Clock::time_point> host_;
#ifdef DDPW_HAVE_CUDA
  std::vector<at::cuda::CUDAEvent> events_;
#endif
};

int train_bench(const BenchOptions& o, const ddp::LaunchEnv& launch, ddp::ProcessGroup& pg,
                const torch::Device& device) {
  const int rank = pg.rank(), world = pg.size();
  Workload w = make_workload(o, device);
  int64_t params = 0;
  for (const auto& p : w.model->parameters()) params += p.numel();

  std::unique_ptr<ddp::DistributedDataParallel<ddpw::Model>> ddp_model;
  std::unique_ptr<NaiveAllreduce> naive;
  // shared_ptr that does not own: the pg outlives both, DistributedDataParallel wants shared.
  std::shared_ptr<ddp::ProcessGroup> pg_ref(&pg, [](ddp::ProcessGroup*) {});
  if (o.mode == "overlapped") {
    ddp::DdpOptions options;
    options.bucket_mb = o.bucket_mb;
    ddp_model = std::make_unique<ddp::DistributedDataParallel<ddpw::Model>>(w.model, pg_ref, options);
  } else if (o.mode == "naive") {
    naive = std::make_unique<NaiveAllreduce>(*w.model, pg);
  }
  ddpw::Model& model = *w.model;

  ddp::DistributedSampler sampler(w.data.size(), world, rank, o.seed);
  ddp::Loader loader(w.data, sampler, o.batch_size, device);  // on a GPU the data move there once
  const int64_t steps_per_epoch = loader.steps();
  DDP_CHECK(steps_per_epoch > 0, "the dataset has no batch for this rank", "use more --samples or fewer ranks");

  model.train();
  // --cuda-graph: the same step (zero_grad, forward, loss, backward with DDP's hooks, the optimizer),
  // captured once and replayed; its refusals (CPU, Gloo, SGD, fp16) are the library's.
  std::unique_ptr<ddp::CudaGraphStep> graph;
  if (o.cuda_graph) {
    ddp::CaptureContext context;
    context.device = device;
    context.backend = ddp_model ? pg.backend_name() : "";
    context.autocast = o.precision != "fp32";
    context.grad_scaler = o.precision == "fp16";
    auto step = [&w, &model](const torch::Tensor& x, const torch::Tensor& y) {
      w.optimizer->zero_grad();
      torch::Tensor loss = w.loss(model.forward(x), y);
      loss.backward();
      w.optimizer->step();
      return loss;
    };
    graph = std::make_unique<ddp::CudaGraphStep>(step, *w.optimizer, context);
  }
  StepTimes timer(device, o.steps);
  ddpw::SyncCounter syncs;
  torch::Tensor final_loss;
  double cpu_start = 0;
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    const int timed = static_cast<int>(step - o.warmup);  // < 0 during warm-up
    if (timed == 0) {
      sync_device(device);  // the warm-up's work is done before the first timed step
      cpu_start = process_cpu_seconds();
      if (device.is_cuda()) syncs.start();
    }
    if (timed >= 0) timer.mark(timed, 0);
    const int64_t epoch = step / steps_per_epoch;
    if (epoch != sampler.epoch()) sampler.set_epoch(epoch);
    ddp::Batch batch = loader.batch(step % steps_per_epoch);
    if (graph) {  // the batch copied into the graph's input, one replay (no forward mark of its own)
      final_loss = (*graph)(batch.input, batch.target);
      if (timed >= 0) timer.mark(timed, 1);
      if (timed >= 0) timer.mark(timed, 2);
      continue;
    }
    w.optimizer->zero_grad();
    torch::Tensor loss = w.loss(model.forward(batch.input), batch.target);
    if (timed >= 0) timer.mark(timed, 1);
    loss.backward();  // overlapped: DDP's hooks allreduce the buckets during this call
    if (naive) naive->average_gradients();
    w.optimizer->step();
    if (timed >= 0) timer.mark(timed, 2);
    final_loss = loss;
  }
  syncs.stop();
  const double cpu_per_step = (process_cpu_seconds() - cpu_start) / o.steps;
  const double last_loss = final_loss.item<double>();  // after the timed steps: it waits for the GPU
  std::vector<double> times, forward_times;
  timer.collect(times, forward_times);
  allreduce_max(pg, times, device);

  // Correctness: data parallelism keeps every rank's parameters identical.
  double sum = 0, sum_sq = 0;
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : model.parameters()) {
      auto d = p.detach().to(torch::kCPU, torch::kFloat64);
      sum += d.sum().item<double>();
      sum_sq += (d * d).sum().item<double>();
    }
  }
  char mine[64];
  std::snprintf(mine, sizeof mine, "%a %a", sum, sum_sq);
  auto all = pg.all_gather_strings(mine);
  const bool same = std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; });
  const bool local = o.mode == "local";  // ranks differ by design: no gradient exchange
  const bool ok = (same || local) && std::isfinite(last_loss);

  if (rank == 0) {
    const double med = median(times);
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    const double p90 = sorted[std::min(sorted.size() - 1, static_cast<size_t>(0.9 * sorted.size()))];
    const size_t buckets = ddp_model ? ddp_model->bucket_count() : naive ? naive->allreduces_per_step() : 0;
    if (!o.no_header) {
      print_metadata(o, launch, pg, device);
      std::printf("# steps: %d warm-up (untimed), %d timed; step time = slowest rank; mode %s%s\n", o.warmup, o.steps,
                  o.mode.c_str(),
                  naive   ? " (buckets column = allreduces per step, one per parameter)"
                  : local ? " (no gradient exchange: a baseline, not data parallelism)"
                          : "");
      std::printf("#\n%s\n%s\n",
                  "#  workload        mode  backend  ranks  threads  batch    params  bucket  buckets"
                  "  steps    median       min       p90    samples/s  impl",
                  "#                                                 /rank             (MiB)                   "
                  "(ms)      (ms)      (ms)     (global)");
    }
    std::printf("%10s %11s %8s %6d %8d %6d %9lld %7.2f %8zu %6d %9.3f %9.3f %9.3f %12.1f  %s\n", o.workload.c_str(),
                o.mode.c_str(), pg.backend_name().c_str(), world, o.threads, o.batch_size,
                static_cast<long long>(params), ddp_model ? o.bucket_mb : 0.0, buckets, o.steps, med * 1e3,
                sorted.front() * 1e3, p90 * 1e3, static_cast<double>(o.batch_size) * world / med,
                graph ? "c++-graph" : "c++");
    std::printf("# timing: %s\n", timer.method());
    if (graph)
      std::printf("# cuda graph: %lld steps replayed, %lld eager (warm-up); the forward-pass line is the replay's\n",
                  static_cast<long long>(graph->replays()), static_cast<long long>(graph->eager_steps()));
    std::printf("# optimizer: %s (%s)\n", o.workload == "cnn" ? "ddp::Adadelta" : "ddp::Sgd",
                device.is_cuda() ? "multi-tensor foreach kernels" : "per tensor, as torch.optim on the CPU");
    if (o.precision != "fp32")
      std::printf(
          "# precision: %s (autocast %s around the forward and the loss; parameters and optimizer state "
          "float32%s)\n",
          o.precision.c_str(), o.precision == "bf16" ? "bfloat16" : "float16",
          o.precision == "fp16" ? "; ddp::GradScaler attached to the optimizer, found_inf on the device" : "");
    if (device.is_cuda()) std::printf("# cuda math: %s\n", cuda_math().c_str());
    if (device.is_cuda() && syncs.available())
      std::printf("# host synchronizations per timed step: %.2f (%lld in %d steps; CUDA sync debug mode)\n",
                  static_cast<double>(syncs.count()) / o.steps, static_cast<long long>(syncs.count()), o.steps);
    std::printf("# rank 0 CPU time per timed step, all its threads: %.3f ms (wall median %.3f ms)\n",
                cpu_per_step * 1e3, med * 1e3);
    // Nothing is sent before the forward pass ends: with overlapping, a step lasts at least this
    // plus the communication time.
    std::printf("# rank 0 forward pass (batch, model, loss) median: %.3f ms\n", median(forward_times) * 1e3);
    if (ok && local)
      std::printf("# OK (local mode: ranks trained alone, final loss %.4g)\n", last_loss);
    else if (ok)
      std::printf("# OK (parameters identical on all ranks, final loss %.4g)\n", last_loss);
    else
      std::printf("# FAILED: %s\n", same ? "the loss is not finite" : "parameters differ between ranks");
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

// Bus bandwidth of an allreduce (nccl-tests: busbw = algbw * 2(n-1)/n) next to the bandwidth of a
// local copy of the same size, both in this run: on the CPU one thread's memcpy on rank 0 (while
// the other ranks wait), on a GPU a device-to-device copy on rank 0's GPU. On a GPU both are timed
// with CUDA events around the operation on the current stream (the allreduce's wait() makes that
// stream wait for NCCL's).
int allreduce_bench(const BenchOptions& o, const ddp::LaunchEnv& launch, ddp::ProcessGroup& pg,
                    const torch::Device& device) {
  const int64_t count = o.allreduce_bytes / 4;
  const int64_t bytes = count * 4;
  const bool cuda = device.is_cuda();
  // Seconds of one run of `work`: the host clock on the CPU, CUDA events on a GPU.
  auto time_once = [&](const std::function<void()>& work) {
#ifdef DDPW_HAVE_CUDA
    if (cuda) {
      at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
      start.record();
      work();
      end.record();
      end.synchronize();
      return 1e-3 * start.elapsed_time(end);
    }
#endif
    const auto t0 = Clock::now();
    work();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Seconds per run of `work`, the median of the timed runs after the warm-up.
  auto time_it = [&](const std::function<void()>& work) {
    std::vector<double> t;
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      sync_device(device);
      const double seconds = time_once(work);
      if (i >= o.warmup) t.push_back(seconds);
    }
    return median(t);
  };

  double copy_gbs = 0;
  pg.barrier("before the copy");
  if (pg.rank() == 0) {
    if (cuda) {
      auto src = torch::ones({count}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
      auto dst = torch::zeros_like(src);
      copy_gbs = bytes / time_it([&] { dst.copy_(src); }) / 1e9;
      DDP_CHECK(dst.min().item<float>() == 1.0f, "device copy check failed", "report this");
    } else {
      std::vector<char> src(bytes, 1), dst(bytes, 0);
      copy_gbs = bytes / time_it([&] { std::memcpy(dst.data(), src.data(), bytes); }) / 1e9;
      DDP_CHECK(dst[bytes - 1] == 1, "memcpy check failed", "report this");
    }
  }
  sync_device(device);
  pg.barrier("after the copy");

  auto buffer = torch::ones({count}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  std::vector<torch::Tensor> tensors{buffer};
  std::vector<double> times;
  double cpu_in_allreduce = 0;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    buffer.fill_(1.0f);
    sync_device(device);
    pg.barrier("allreduce iteration");
    sync_device(device);
    const double c0 = process_cpu_seconds();
    const double t = time_once([&] { pg.wait(pg.allreduce_sum_async(tensors), "allreduce"); });
    if (i >= o.warmup) {
      times.push_back(t);
      cpu_in_allreduce += process_cpu_seconds() - c0;
    }
  }
  allreduce_max(pg, times, device);
  const bool ok = buffer.min().item<float>() == pg.size() && buffer.max().item<float>() == pg.size();

  if (pg.rank() == 0) {
    const int n = pg.size();
    const double med = median(times);
    const double algbw = bytes / med / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    if (!o.no_header) {
      print_metadata(o, launch, pg, device);
      std::printf("# allreduce (sum, float32) of one buffer; %d warm-up, %d timed; time = slowest rank, median\n",
                  o.warmup, o.steps);
      if (cuda)
        std::printf(
            "# timing: CUDA events around each allreduce on the current stream (which waits for NCCL's)\n"
            "# memcpy column: device-to-device copy of the same size on rank 0's GPU, CUDA events\n#\n");
      else
        std::printf(
            "# timing: host steady clock\n"
            "# memcpy column: one thread's memcpy on rank 0 while the other ranks wait, same size\n#\n");
      std::printf("#       size  ranks      time    algbw    busbw   memcpy  busbw/memcpy\n");
      std::printf("#        (B)              (ms)   (GB/s)   (GB/s)   (GB/s)\n");
    }
    std::printf("%12lld %6d %9.3f %8.3f %8.3f %8.3f %13.3f\n", static_cast<long long>(bytes), n, med * 1e3, algbw,
                busbw, copy_gbs, busbw / copy_gbs);
    std::printf("# rank 0 CPU time per allreduce, all its threads: %.3f ms\n", cpu_in_allreduce / o.steps * 1e3);
    std::printf(ok ? "# OK (every element equals the world size)\n" : "# FAILED: wrong allreduce result\n");
    std::fflush(stdout);
  }
  return ok ? ddp::kExitOk : ddp::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  const BenchOptions o = parse(argc, argv);
  const char* rank = std::getenv("RANK");  // names the failing process in a multi-rank log
  ddp::LaunchEnv launch;
  return ddpw::run_main(
      [&] {
        launch = ddp::resolve_launch_env(ddp::current_environment());
        if (!launch.warning.empty()) std::fprintf(stderr, "warning: %s\n", launch.warning.c_str());
        torch::set_num_threads(o.threads);
        const torch::Device device = ddp::choose_device(o.device, launch.local_rank);
        if (device.is_cuda()) set_cuda_math(o);
        ddp::ProcessGroupOptions pg_options;
        pg_options.backend = o.backend;
        const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
        pg_options.rendezvous_timeout = timeout;
        pg_options.collective_timeout = timeout;
        auto pg = ddp::init_process_group(launch, device, pg_options);
        return o.allreduce_bytes > 0 ? allreduce_bench(o, launch, *pg, device) : train_bench(o, launch, *pg, device);
      },
      std::string("[ddp_train_bench rank ") + (rank ? rank : "?") + "]");
}
