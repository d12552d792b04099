// step1_multigpu_fork — one process per device on one node, started by the program itself:
// the C++ analogue of torch.multiprocessing.spawn.
//
//   step1_multigpu_fork 50 10              # one worker per GPU
//   step1_multigpu_fork 50 10 --nproc 2    # no GPU: 2 workers on the CPU
//
// New since step 0, in blocks marked TODO(step1): the parent starts the workers, they meet on
// localhost, each trains on its own shard of the data, DistributedDataParallel averages the
// gradients, and only global rank 0 writes the snapshot. `scripts/check-step 1` says when it is done.
#include <torch/torch.h>

#include "course/check_launch.h"            // defines: LaunchValues, check_launch (who am I)
#include "course/compute.h"                 // defines: configure_compute (threads per rank, --deterministic)
#include "course/epoch_report.h"            // defines: EpochReporter (every line a rank prints, losses, metrics)
#include "course/from_options.h"            // defines: save/load_snapshot, ddp_options, process_group_options
#include "course/options.h"                 // defines: Options, parse_options
#include "course/run_main.h"                // defines: run_main; exit codes (error.h)
#include "course/run_report.h"              // defines: print_settings, print_rank_table
#include "course/workload.h"                // defines: Workload (data, model, optimizer, loss)
#include "ddp/data.h"                       // defines: DistributedSampler (the data order), Loader (batches)
#include "ddp/device.h"                     // defines: choose_device, workers_per_node
#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel
#include "ddp/process_group.h"              // defines: ProcessGroup, init_process_group
#include "ddp/spawn.h"                      // defines: spawn (start one worker per rank)
#include "ddp/stop_agreement.h"             // defines: StopAgreement (all ranks stop at one step on SIGTERM/SIGUSR1)

class Trainer {
 public:
  Trainer(const ddpw::Options& opt, const ddp::LaunchEnv& launch, torch::Device device,
          std::shared_ptr<ddp::ProcessGroup> pg)
      : opt_(opt),
        launch_(launch),
        workload_(ddpw::make_workload(opt)),
        // TODO(step1): give each rank its own shard of every epoch's shuffle (as DistributedSampler).
        sampler_(workload_.train.size(), /*num_replicas=*/1, /*rank=*/0, opt.seed),
        // TODO(step1): wrap the model to average gradients. Hint: ddp::DistributedDataParallel, ddpw::ddp_options.
        model_(workload_.make_model(device)),

        loader_(workload_.train, sampler_, opt.batch_size, device),
        optimizer_(workload_.make_optimizer(plain_model())),
        stop_(pg.get()),
        reporter_(opt, launch, device, workload_, pg.get()) {
    if (auto state = ddpw::load_snapshot(opt, plain_model(), *optimizer_, launch.world_size)) {
      epochs_run_ = state->epochs_run;
      first_step_ = state->step_in_epoch;
      reporter_.print("Resuming training from snapshot {} at epoch {}, step {}", opt.snapshot_path, epochs_run_,
                      first_step_);
    }
  }

  int train() {  // the exit code: 0 when all epochs ran, kExitRequeue when a signal stopped training
    for (int64_t epoch = epochs_run_; epoch < opt_.total_epochs; ++epoch) {
      if (!run_epoch(epoch)) return ddp::kExitRequeue;
      if ((epoch + 1) % opt_.save_every == 0 || epoch + 1 == opt_.total_epochs) save(epoch + 1, 0);
    }
    reporter_.end_training(plain_model());
    return ddp::kExitOk;
  }

 private:
  // TODO(step1): the plain model inside the wrapper: snapshots hold its state, so they load without DDP.
  ddpw::Model& plain_model() { return *model_; }

  torch::Tensor run_batch(const ddp::Batch& batch) {
    optimizer_->zero_grad();
    auto loss = workload_.loss(model_->forward(batch.input), batch.target);  // TODO(step1): through the wrapper
    loss.backward();
    optimizer_->step();
    return loss;
  }

  bool run_epoch(int64_t epoch) {  // false when a signal stopped it: the snapshot is then of this step
    sampler_.set_epoch(epoch);     // a new shuffle every epoch, the same for the same seed
    ddpw::set_learning_rate(*optimizer_, workload_.learning_rate(epoch));
    auto log = reporter_.begin_epoch(epoch, loader_, first_step_);
    for (int64_t step = first_step_; step < loader_.steps(); ++step) {
      if (stop_.should_stop()) {  // SIGTERM or SIGUSR1: every rank stops at this same step
        reporter_.print("Stopping at epoch {}, step {} ({})", epoch, step, ddp::stop_reason());
        save(epoch, step);
        return false;
      }
      const ddp::Batch batch = loader_.batch(step);
      log.add(batch, run_batch(batch));  // the loss stays on the device: nothing waits for it
    }
    first_step_ = 0;
    reporter_.end_epoch(log, plain_model());
    return true;
  }

  void save(int64_t epochs_run, int64_t step) {
    // TODO(step1): every rank holds the same weights: only global rank 0 writes.

    ddpw::save_snapshot(opt_, plain_model(), *optimizer_, {epochs_run, step, launch_.world_size});
    reporter_.print("Training snapshot saved at {} ({} epochs run, step {})", opt_.snapshot_path, epochs_run, step);
  }

  const ddpw::Options& opt_;
  const ddp::LaunchEnv launch_;
  ddpw::Workload workload_;
  ddp::DistributedSampler sampler_;
  // TODO(step1): the model lives inside DistributedDataParallel.
  std::shared_ptr<ddpw::Model> model_;

  ddp::Loader loader_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  ddp::StopAgreement stop_;
  ddpw::EpochReporter reporter_;
  int64_t epochs_run_ = 0, first_step_ = 0;
};

// TODO(step1): spawn() starts one worker per device, each as rank `rank` of `world_size`.
int worker(const ddpw::Options& opt, int /*rank*/, int /*world_size*/) {
  ddp::install_stop_signal_handlers();
  // TODO(step1): who am I: rank `rank` of `world_size`, all on this node; rank 0 serves on localhost.
  ddpw::LaunchValues me;  // who am I: alone, global rank 0 of world size 1, local rank 0

  const ddp::LaunchEnv launch = ddpw::check_launch(me, opt);
  const torch::Device device = ddp::choose_device(opt.device, launch.local_rank);
  const int threads = ddpw::configure_compute(opt, launch);
  // TODO(step1): join the process group (Gloo or NCCL), after choosing the device. Hint: ddp::init_process_group.
  std::shared_ptr<ddp::ProcessGroup> pg;  // none while we train alone: step 1 creates one

  ddpw::print_settings(opt, launch, device, threads, launch.global_rank);
  ddpw::print_rank_table(pg.get(), launch, device);  // each rank's host, local rank and device
  Trainer trainer(opt, launch, device, pg);
  return trainer.train();
}

int main(int argc, char** argv) {
  // TODO(step1): one worker per visible GPU (else --nproc on the CPU), each running worker(opt, rank,
  //   world_size); wait for them all, like torch.multiprocessing.spawn. Hint: ddp::spawn, workers_per_node.
  const ddpw::Options opt =
      ddpw::parse_options(argc, argv, ddpw::kTrainingOptions | ddpw::kDistributedOptions | ddpw::kSpawnOptions);
  return ddpw::run_main([&] { return worker(opt, /*rank=*/0, /*world_size=*/1); });
}
