// step0_single_gpu — train one model on one device: the course's starting point.
//
//   ./build/bin/step0_single_gpu 50 10       # 50 epochs, a snapshot every 10 epochs
//
// The GPU is used when there is one, else the CPU (--device cpu forces it). The snapshot holds all
// a run needs to continue exactly: run the same command again after a crash and it resumes.
// Later steps keep this program and add one concept each, in blocks marked TODO(stepN). The names
// local_rank, global_rank and world_size are already the final ones; alone they are 0, 0 and 1.
#include <torch/torch.h>

#include "course/check_launch.h"  // defines: LaunchValues, check_launch (who am I)
#include "course/compute.h"       // defines: configure_compute (threads per rank, --deterministic)
#include "course/epoch_report.h"  // defines: EpochReporter (every line a rank prints, losses, metrics)
#include "course/from_options.h"  // defines: save/load_snapshot, ddp_options, process_group_options
#include "course/options.h"       // defines: Options, parse_options
#include "course/run_main.h"      // defines: run_main; exit codes (error.h)
#include "course/run_report.h"    // defines: print_settings, print_rank_table
#include "course/workload.h"      // defines: Workload (data, model, optimizer, loss)
#include "ddp/data.h"             // defines: DistributedSampler (the data order), Loader (batches)
#include "ddp/device.h"           // defines: choose_device
#include "ddp/process_group.h"    // defines: ProcessGroup
#include "ddp/stop_agreement.h"   // defines: StopAgreement (all ranks stop at one step on SIGTERM/SIGUSR1)

class Trainer {
 public:
  Trainer(const ddpw::Options& opt, const ddp::LaunchEnv& launch, torch::Device device,
          std::shared_ptr<ddp::ProcessGroup> pg)
      : opt_(opt),
        launch_(launch),
        workload_(ddpw::make_workload(opt)),
        sampler_(workload_.train.size(), /*num_replicas=*/1, /*rank=*/0, opt.seed),
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
  ddpw::Model& plain_model() { return *model_; }

  torch::Tensor run_batch(const ddp::Batch& batch) {
    optimizer_->zero_grad();
    auto loss = workload_.loss(model_->forward(batch.input), batch.target);
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
    ddpw::save_snapshot(opt_, plain_model(), *optimizer_, {epochs_run, step, launch_.world_size});
    reporter_.print("Training snapshot saved at {} ({} epochs run, step {})", opt_.snapshot_path, epochs_run, step);
  }

  const ddpw::Options& opt_;
  const ddp::LaunchEnv launch_;
  ddpw::Workload workload_;
  ddp::DistributedSampler sampler_;
  std::shared_ptr<ddpw::Model> model_;
  ddp::Loader loader_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  ddp::StopAgreement stop_;
  ddpw::EpochReporter reporter_;
  int64_t epochs_run_ = 0, first_step_ = 0;
};

// One process that trains alone. From step 1 on, every device gets a worker of its own.
int worker(const ddpw::Options& opt) {
  ddp::install_stop_signal_handlers();
  ddpw::LaunchValues me;  // who am I: alone, global rank 0 of world size 1, local rank 0

  const ddp::LaunchEnv launch = ddpw::check_launch(me, opt);
  const torch::Device device = ddp::choose_device(opt.device, launch.local_rank);
  const int threads = ddpw::configure_compute(opt, launch);
  std::shared_ptr<ddp::ProcessGroup> pg;  // none while we train alone: step 1 creates one

  ddpw::print_settings(opt, launch, device, threads, launch.global_rank);
  ddpw::print_rank_table(pg.get(), launch, device);  // each rank's host, local rank and device
  Trainer trainer(opt, launch, device, pg);
  return trainer.train();
}

int main(int argc, char** argv) {
  const ddpw::Options opt = ddpw::parse_options(argc, argv, ddpw::kTrainingOptions);
  return ddpw::run_main([&] { return worker(opt); });
}
