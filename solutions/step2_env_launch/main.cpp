// step2_env_launch — the same trainer, started by a launcher instead of by itself: it reads who it
// is (rank, local rank, world size, master) from the environment the launcher sets.
//
//   torchrun --standalone --nproc_per_node=2 --no-python step2_env_launch 50 10
//   mpirun -np 2 step2_env_launch 50 10
//
// New since step 1 (marked TODO(step2)): no spawn, the launch environment instead. The snapshot
// (since step 0) lets a launcher that restarts failed workers (torchrun --max-restarts) resume.
// The exercise (step2_env_launch/) and the solution (solutions/step2_env_launch/) differ only
// inside those blocks.
// A TODO block is the TODO comment and the code right below it, up to a blank line or the end
// of the enclosing block.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "ddp/data.h"            // defines: DistributedSampler (the data order), Loader (batches)
#include "ddp/device.h"          // defines: choose_device, choose_threads, visible_gpus
#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel
#include "ddp/epoch_report.h"    // defines: EpochReporter (losses, test accuracy, metrics file)
#include "ddp/error.h"           // defines: run_main, exit codes
#include "ddp/launch_env.h"      // defines: LaunchEnv (ranks and world size)
#include "ddp/metrics.h"         // defines: Progress (lines for batch logs)
#include "ddp/options.h"         // defines: Options, parse_options
#include "ddp/process_group.h"   // defines: ProcessGroup, any_rank
#include "ddp/run_report.h"      // defines: print_settings, print_rank_table
#include "ddp/snapshot.h"        // defines: save_snapshot, load_snapshot
// TODO(step2): the launcher starts the processes: no spawn any more.
#include "ddp/stop_signal.h"     // defines: stop_requested (SIGTERM / SIGUSR1)
#include "ddp/workload.h"        // defines: Workload (data, model, optimizer, loss)

class Trainer {
 public:
  Trainer(const ddp::Options& opt, const ddp::LaunchEnv& launch, torch::Device device,
          std::shared_ptr<ddp::ProcessGroup> pg, int threads)
      : opt_(opt),
        device_(device),
        pg_(std::move(pg)),
        local_rank_(launch.local_rank),
        global_rank_(launch.global_rank),
        world_size_(launch.world_size),
        workload_(ddp::make_workload(opt)),

        // each rank's own shard of every epoch's shuffle
        sampler_(workload_.train.size(), /*num_replicas=*/world_size_, /*rank=*/global_rank_, opt.seed),

        loader_(workload_.train, sampler_, opt.batch_size, device),

        // DDP: rank 0's weights are broadcast, backward() averages the gradients
        model_(workload_.make_model(device), pg_, ddp::ddp_options(opt)),

        optimizer_(workload_.make_optimizer(plain_model())),
        reporter_(opt, workload_, device, pg_.get(), global_rank_, world_size_, launch.local_world_size, threads) {
    tag_ = std::string(device.is_cuda() ? "[GPU" : "[CPU") + std::to_string(local_rank_) + "]";
    if (opt.fresh) return;
    if (auto state = ddp::load_snapshot(opt.snapshot_path, plain_model(), *optimizer_, world_size_)) {
      epochs_run_ = state->epochs_run;
      first_step_ = state->step_in_epoch;
      std::printf("%s Resuming training from snapshot %s at epoch %lld, step %lld\n", tag_.c_str(),
                  opt.snapshot_path.c_str(), static_cast<long long>(epochs_run_), static_cast<long long>(first_step_));
    }
  }

  // Returns the exit code: 0 when all epochs ran, kExitRequeue when a signal stopped training.
  int train() {
    for (int64_t epoch = epochs_run_; epoch < opt_.total_epochs; ++epoch) {
      if (!run_epoch(epoch)) return ddp::kExitRequeue;
      if ((epoch + 1) % opt_.save_every == 0 || epoch + 1 == opt_.total_epochs) save(epoch + 1, 0);
    }
    reporter_.end_training(plain_model(), tag_);
    return ddp::kExitOk;
  }

 private:
  // the plain model inside the wrapper: snapshots hold its state, so they load without DDP
  ddp::Model& plain_model() { return *model_.module(); }

  double run_batch(const ddp::Batch& batch) {
    optimizer_->zero_grad();
    auto loss = workload_.loss(model_->forward(batch.input), batch.target);
    loss.backward();
    optimizer_->step();
    return loss.item<double>();
  }

  // Returns false when a stop was requested: the snapshot is then written at this very step.
  bool run_epoch(int64_t epoch) {
    sampler_.set_epoch(epoch);  // a new shuffle every epoch, the same for the same seed
    ddp::set_learning_rate(*optimizer_, workload_.learning_rate(epoch));
    std::printf("%s Epoch %lld | Batchsize: %lld | Steps: %lld\n", tag_.c_str(), static_cast<long long>(epoch),
                static_cast<long long>(opt_.batch_size), static_cast<long long>(loader_.steps()));
    std::fflush(stdout);
    ddp::Progress progress(tag_, loader_.steps(), opt_.batch_size, opt_.log_every);
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t batches = 0, samples = 0;
    for (int64_t step = first_step_; step < loader_.steps(); ++step) {
      if (ddp::any_rank(pg_.get(), ddp::stop_requested())) {
        std::printf("%s Stopping at epoch %lld, step %lld (%s)\n", tag_.c_str(), static_cast<long long>(epoch),
                    static_cast<long long>(step), ddp::stop_reason());
        save(epoch, step);
        return false;
      }
      const ddp::Batch batch = loader_.batch(step);
      loss_sum += run_batch(batch);
      ++batches;
      samples += batch.input.size(0);
      progress.update(step + 1, loss_sum / static_cast<double>(batches));
    }
    progress.finish();
    first_step_ = 0;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    reporter_.end_epoch(epoch, loss_sum, batches, samples, seconds, loader_.take_load_seconds(), plain_model());
    return true;
  }

  void save(int64_t epochs_run, int64_t step_in_epoch) {
    // every rank holds the same weights: only global rank 0 writes
    if (global_rank_ != 0) return;

    const ddp::TrainingState state{epochs_run, step_in_epoch, opt_.seed, world_size_};
    ddp::save_snapshot(opt_.snapshot_path, plain_model(), *optimizer_, state);
    std::printf("%s Training snapshot saved at %s (%lld epochs run, step %lld)\n", tag_.c_str(),
                opt_.snapshot_path.c_str(), static_cast<long long>(epochs_run), static_cast<long long>(step_in_epoch));
    std::fflush(stdout);
  }

  const ddp::Options& opt_;
  torch::Device device_;
  std::shared_ptr<ddp::ProcessGroup> pg_;
  int local_rank_, global_rank_, world_size_;
  ddp::Workload workload_;
  ddp::DistributedSampler sampler_;
  ddp::Loader loader_;

  // the model lives inside DistributedDataParallel
  ddp::DistributedDataParallel<ddp::Model> model_;

  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  ddp::EpochReporter reporter_;
  std::string tag_;
  int64_t epochs_run_ = 0, first_step_ = 0;
};

// One worker: join the others, then train.
// TODO(step2): the launcher started this process and tells it who it is in the environment
//   (torchrun: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; mpirun: OMPI_COMM_WORLD_*;
//   srun: SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS). The worker takes no rank any more.
//   Hint: ddp::resolve_launch_env(ddp::current_environment(), ddp::launch_overrides(opt)).
int worker(const ddp::Options& opt) {
  ddp::install_stop_signal_handlers();
  const ddp::LaunchEnv launch = ddp::resolve_launch_env(ddp::current_environment(), ddp::launch_overrides(opt));

  const torch::Device device = ddp::choose_device(opt.device, launch.local_rank, launch.local_world_size);
  const int threads = ddp::choose_threads(opt.threads, launch.local_world_size);
  torch::set_num_threads(threads);
  // the process group (Gloo on CPU, NCCL on GPUs), joined after the device is chosen
  auto pg = ddp::init_process_group(launch, device, ddp::process_group_options(opt));

  ddp::print_settings(opt, launch, device, threads, launch.global_rank);
  ddp::print_rank_table(pg.get(), launch, device);
  Trainer trainer(opt, launch, device, pg, threads);
  return trainer.train();
}

int main(int argc, char** argv) {
  // TODO(step2): no spawn and no --nproc: the launcher starts one process per device and waits for
  //   them all. Hint: parse_options without kSpawnOptions, then ddp::run_main(worker).
  const ddp::Options opt = ddp::parse_options(argc, argv, "Step 2: one process per device, started by a launcher",
                                              ddp::kTrainingOptions | ddp::kDistributedOptions);
  return ddp::run_main([&] { return worker(opt); });
}
