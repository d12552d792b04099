#include "course/trainer.h"

#include <c10/core/StreamGuard.h>

#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "course/check_launch.h"
#include "course/compute.h"
#include "course/epoch_report.h"
#include "course/from_options.h"
#include "course/kept_memory.h"
#include "course/run_main.h"
#include "course/run_report.h"
#include "course/zero_settings.h"
#include "ddp/cuda_graph_step.h"
#include "ddp/data.h"
#include "ddp/device.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/error.h"
#include "ddp/host.h"
#include "ddp/process_group.h"
#include "ddp/sharded_adamw.h"
#include "ddp/sharded_snapshot.h"
#include "ddp/snapshot.h"
#include "ddp/spawn.h"
#include "ddp/stop_agreement.h"
#include "ddp/zero_data_parallel.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

// What differs between the strategies: the model's wrapper, the optimizer and its learning rate,
// the snapshot. The epoch loop (train_epochs) is the same for all.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual Model& plain_model() = 0;  // what evaluation, the checksum and --export-weights see
  virtual void begin_epoch(int64_t epoch) = 0;
  virtual torch::Tensor train_step(const Batch& batch) = 0;
  virtual std::optional<TrainingState> load() = 0;    // all ranks call it
  virtual void save(const TrainingState& state) = 0;  // all ranks call it
  virtual KeptBytes kept() = 0;                       // what this rank keeps between steps, measured
  virtual std::string graph_summary() const { return ""; }  // --cuda-graph: how the steps ran
  // Before the host reads what the steps computed: --cuda-graph waits for the replays still queued
  // (with the collective timeout: a replayed collective has no NCCL watchdog).
  virtual void wait_for_steps() {}
};

// A ZeRO run's manifest (JSON) where single or ddp expects a plain snapshot: name the strategies that
// wrote it (the plain reader could only say its magic bytes are wrong). Every rank reads the same file.
void refuse_sharded_snapshot(const Options& o) {
  std::ifstream in(o.snapshot_path);
  char first = 0;
  if (o.fresh || !(in >> first) || first != '{') return;
  const std::string written = "a sharded one, written by --strategy zero1 or zero2";
  throw Error("snapshot '" + o.snapshot_path + "' is " + written + ", but this run's strategy is " + o.strategy +
                  "; it was left untouched",
              "resume with the strategy that wrote it, give this run its own file with --snapshot PATH, or start "
              "over with --fresh");
}

// single (step 0) and ddp (steps 1-3): every rank holds the whole model and the workload's
// optimizer, with its rate per epoch; only global rank 0 writes the (plain) snapshot.
class Replicated final : public Strategy {
 public:
  Replicated(const Options& o, const LaunchEnv& launch, Workload& w, torch::Device device,
             const std::shared_ptr<ProcessGroup>& pg)
      : options_(o), launch_(launch), workload_(w), model_(w.make_model(device)) {
    // --cuda-graph: the capture stream first, and DDP built under it, so that its gradient hooks
    // run on the stream the step is captured on (cuda_graph_step.h).
    std::optional<c10::Stream> capture_stream;
    if (o.cuda_graph) capture_stream = CudaGraphStep::capture_stream(device);
    {
      c10::OptionalStreamGuard on_capture_stream(capture_stream);
      if (pg) ddp_ = std::make_unique<DistributedDataParallel<Model>>(model_, pg, ddp_options(o));
    }
    optimizer_ = w.make_optimizer(*model_);
    if (o.cuda_graph) {  // the same step, captured after its warm-up and replayed (cuda_graph_step.h)
      CaptureContext context = capture_context(o, device, pg.get());
      context.stream = capture_stream;
      if (ddp_) context.gradient_streams = ddp_->gradient_streams();
      context.process_group = pg.get();
      graph_ = std::make_unique<CudaGraphStep>([this](const torch::Tensor& x, const torch::Tensor& y) { return step(x, y); },
                                               *optimizer_, context);
    }
  }
  Model& plain_model() override { return *model_; }
  void begin_epoch(int64_t epoch) override { set_learning_rate(*optimizer_, workload_.learning_rate(epoch)); }
  torch::Tensor train_step(const Batch& batch) override {
    return graph_ ? (*graph_)(batch.input, batch.target) : step(batch.input, batch.target);
  }
  std::optional<TrainingState> load() override {
    refuse_sharded_snapshot(options_);
    return load_snapshot(options_, *model_, *optimizer_, launch_.world_size);
  }
  void save(const TrainingState& state) override {
    if (launch_.global_rank == 0) save_snapshot(options_, *model_, *optimizer_, state);
  }
  KeptBytes kept() override {
    return kept_bytes(*model_, *optimizer_, ddp_ ? "DDP: every rank keeps all of it" : "one process");
  }
  std::string graph_summary() const override {
    if (!graph_) return "";
    return "CUDA graph: " + std::to_string(graph_->replays()) + " steps replayed, " +
           std::to_string(graph_->eager_steps()) + " eager (warm-up, batches of another shape)";
  }
  void wait_for_steps() override {
    if (graph_) graph_->wait_for_replays();
  }

 private:
  const Options& options_;
  const LaunchEnv& launch_;
  Workload& workload_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<DistributedDataParallel<Model>> ddp_;  // none for single
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<CudaGraphStep> graph_;  // --cuda-graph

  torch::Tensor step(const torch::Tensor& input, const torch::Tensor& target) {
    optimizer_->zero_grad();
    auto output = ddp_ ? ddp_->forward(input) : model_->forward(input);  // ddp: through the wrapper
    auto loss = workload_.loss(output, target);
    loss.backward();  // with ddp: the buckets' allreduce runs during backward (the hooks of ddp_)
    optimizer_->step();
    return loss;
  }
};

// zero1 and zero2 (step 4): ZeroDataParallel and ShardedAdamW, DeepSpeed's clipping and WarmupLR
// every step; every rank writes its shard of the snapshot, rank 0 the manifest.
class Sharded final : public Strategy {
 public:
  Sharded(const Options& o, Workload& w, torch::Device device, const std::shared_ptr<ProcessGroup>& pg)
      : options_(o),
        workload_(w),
        model_(w.make_model(device), pg, zero_options(o)),
        optimizer_(model_, adam_options(o)) {
    if (o.cuda_graph) capture_context(o, device, pg.get());  // refuses: ZeRO's step is not captured
  }
  Model& plain_model() override { return *model_.module(); }
  void begin_epoch(int64_t) override {}  // the rate changes every step
  torch::Tensor train_step(const Batch& batch) override {
    optimizer_.zero_grad();
    auto loss = workload_.loss(model_(batch.input), batch.target);
    loss.backward();
    if (options_.deepspeed.gradient_clipping > 0) optimizer_.clip_grad_norm(options_.deepspeed.gradient_clipping);
    optimizer_.set_lr(learning_rate_at(options_, optimizer_.steps_taken()));
    optimizer_.step();
    return loss;
  }
  std::optional<TrainingState> load() override { return load_sharded_snapshot(options_, optimizer_); }
  void save(const TrainingState& state) override { save_sharded_snapshot(options_, optimizer_, state); }
  KeptBytes kept() override { return kept_bytes(model_, optimizer_); }

 private:
  const Options& options_;
  Workload& workload_;
  ZeroDataParallel<Model> model_;
  ShardedAdamW optimizer_;
};

// The one epoch loop of the trainer (steps 0-4 each keep theirs on screen, since they teach it).
int train_epochs(const Options& o, const LaunchEnv& launch, torch::Device device,
                 const std::shared_ptr<ProcessGroup>& pg, Workload& workload) {
  // In the steps' order (sampler, model, loader, optimizer): the same seed gives the same run.
  DistributedSampler sampler(workload.train.size(), launch.world_size, launch.global_rank, o.seed);
  std::unique_ptr<Strategy> strategy;
  if (o.zero_stage > 0)
    strategy = std::make_unique<Sharded>(o, workload, device, pg);
  else
    strategy = std::make_unique<Replicated>(o, launch, workload, device, pg);
  Loader loader(workload.train, sampler, o.batch_size, device);
  StopAgreement stop(pg.get());
  EpochReporter reporter(o, launch, device, workload, pg.get());

  int64_t epochs_run = 0, first_step = 0;
  if (auto state = strategy->load()) {
    epochs_run = state->epochs_run;
    first_step = state->step_in_epoch;
    reporter.print("Resuming training from snapshot {} at epoch {}, step {}", o.snapshot_path, epochs_run, first_step);
  }
  auto save = [&](int64_t epochs, int64_t step) {
    strategy->wait_for_steps();
    strategy->save({epochs, step, launch.world_size});
    reporter.announce("Training snapshot saved at {} ({} epochs run, step {})", o.snapshot_path, epochs, step);
  };
  for (int64_t epoch = epochs_run; epoch < o.total_epochs; ++epoch) {
    sampler.set_epoch(epoch);
    strategy->begin_epoch(epoch);
    auto log = reporter.begin_epoch(epoch, loader, first_step);
    log.before_reads([&] { strategy->wait_for_steps(); });
    for (int64_t step = first_step; step < loader.steps(); ++step) {
      if (stop.should_stop()) {  // SIGTERM or SIGUSR1: every rank stops at this same step
        reporter.print("Stopping at epoch {}, step {} ({})", epoch, step, stop_reason());
        save(epoch, step);
        return kExitRequeue;
      }
      const Batch batch = loader.batch(step);
      log.add(batch, strategy->train_step(batch));
    }
    first_step = 0;
    strategy->wait_for_steps();
    reporter.end_epoch(log, strategy->plain_model());
    if (epoch == epochs_run) report_memory(reporter, strategy->kept());  // each rank: what it keeps (step 4)
    if ((epoch + 1) % o.save_every == 0 || epoch + 1 == o.total_epochs) save(epoch + 1, 0);
  }
  if (const std::string graph = strategy->graph_summary(); !graph.empty()) reporter.print("{}", graph);
  reporter.end_training(strategy->plain_model());
  return kExitOk;
}

}  // namespace

Trainer::Trainer(const Options& options)
    : options_(options), seen_(resolve_launch_env(current_environment(), launch_overrides(options))) {
  // GPUs are counted only when they decide how many workers to start (it initialises CUDA).
  const bool counts = seen_.world_size == 1 && options.gpus > 1 && options.device != "cpu";
  // Its errors come before check_launch names the rank: in a merged log of several ranks, say who.
  if (seen_.world_size > 1) set_error_prefix("[rank " + std::to_string(seen_.global_rank) + " @ " + host_name() + "]");
  plan_ = plan_trainer_launch(options, seen_, counts ? visible_gpus() : 0);
}

int Trainer::fit(const WorkloadFactory& make_workload) {
  const ProgramId& p = options_.program;
  DDP_CHECK(make_workload, "fit() was given nothing to train",
            p.kind == "exercise" && p.step == 5
                ? "complete TODO(step5) in " + p.name + "/main.cpp: pass the course's workload, ddpw::make_workload"
                : "pass a WorkloadFactory, e.g. ddpw::make_workload");
  if (plan_.spawn_workers > 0) {  // Lightning's devices=N without a launcher: N workers, as step 1
    const int workers = plan_.spawn_workers;
    const int port = options_.master_port > 0 ? options_.master_port : spawn_master_port();
    return spawn(workers, [&](int rank) {
      LaunchValues me;  // rank `rank` of `workers`, all on this node
      me.global_rank = me.local_rank = rank;
      me.world_size = me.local_world_size = workers;
      me.master_port = port;
      return train_rank(me, make_workload);
    });
  }
  LaunchValues me;  // what the launcher says (the library's reading, as step 3 reads it by hand)
  if (seen_.world_size > 1) {
    me.global_rank = seen_.global_rank;
    me.local_rank = seen_.local_rank;
    me.world_size = seen_.world_size;
    me.local_world_size = seen_.local_world_size;
  }
  return train_rank(me, make_workload);
}

int Trainer::train_rank(const LaunchValues& me, const WorkloadFactory& make_workload) {
  install_stop_signal_handlers();
  const LaunchEnv launch = check_launch(me, options_);
  const torch::Device device = choose_device(options_.device, launch.local_rank);
  const int threads = configure_compute(options_, launch);
  std::shared_ptr<ProcessGroup> pg;  // none for single, as in step 0
  if (options_.strategy != "single") pg = init_process_group(launch, device, process_group_options(options_));
  print_settings(options_, launch, device, threads, launch.global_rank);
  print_rank_table(pg.get(), launch, device);
  Workload workload = make_workload(options_);
  return train_epochs(options_, launch, device, pg, workload);
}

}  // namespace ddpw
