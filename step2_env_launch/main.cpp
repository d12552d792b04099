// step2_env_launch — the same trainer, started by a launcher instead of by itself.
//
//   torchrun --standalone --nproc_per_node=2 --no-python step2_env_launch 50 10
//   mpirun -np 2 step2_env_launch 50 10
//
// New since step 1, in blocks marked TODO(step2): no spawn; every process reads who it is from
// the launcher's environment. The snapshot lets a launcher that restarts failed workers
// (torchrun --max-restarts) resume. `scripts/check-step 2` says when it is done.
#include <torch/torch.h>

#include "course/check_launch.h"            // defines: LaunchValues, check_launch (who am I)
#include "course/compute.h"                 // defines: configure_compute (threads per rank, --deterministic)
#include "course/epoch_report.h"            // defines: EpochReporter (every line a rank prints, losses, metrics)
#include "course/from_options.h"            // defines: save/load_snapshot, ddp_options, process_group_options
#include "course/options.h"                 // defines: Options, parse_options
#include "course/run_main.h"                // defines: run_main; exit codes (error.h)
#include "course/run_report.h"              // defines: print_settings, print_rank_table
#include "ddp/data.h"                       // defines: DistributedSampler (the data order), Loader (batches)
#include "ddp/device.h"                     // defines: choose_device, workers_per_node
#include "ddp/distributed_data_parallel.h"  // defines: DistributedDataParallel
#include "ddp/process_group.h"              // defines: ProcessGroup, init_process_group
// TODO(step2): the launcher starts the processes: no spawn any more.
#include "course/workload.h"     // defines: Workload (data, model, optimizer, loss)
#include "ddp/spawn.h"           // defines: spawn (start one worker per rank)
#include "ddp/stop_agreement.h"  // defines: StopAgreement (all ranks stop at one step on SIGTERM/SIGUSR1)

class Trainer {
 public:
  Trainer(const ddpw::Options& opt, const ddp::LaunchEnv& launch, torch::Device device,
          std::shared_ptr<ddp::ProcessGroup> pg)
      : opt_(opt),
        launch_(launch),
        workload_(ddpw::make_workload(opt)),
        // TODO(step1): give each rank its own shard of every epoch's shuffle (as DistributedSampler).
        sampler_(workload_.train.size(), launch.world_size, launch.global_rank, opt.seed),
        // TODO(step1): wrap the model to average gradients. Hint: ddp::DistributedDataParallel, ddpw::ddp_options.
        model_(workload_.make_model(device), pg, ddpw::ddp_options(opt)),

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
  ddpw::Model& plain_model() { return *model_.module(); }

  torch::Tensor run_batch(const ddp::Batch& batch) {
    optimizer_->zero_grad();
    auto loss = workload_.loss(model_(batch.input), batch.target);  // TODO(step1): through the wrapper
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
    if (launch_.global_rank != 0) return;

    ddpw::save_snapshot(opt_, plain_model(), *optimizer_, {epochs_run, step, launch_.world_size});
    reporter_.print("Training snapshot saved at {} ({} epochs run, step {})", opt_.snapshot_path, epochs_run, step);
  }

  const ddpw::Options& opt_;
  const ddp::LaunchEnv launch_;
  ddpw::Workload workload_;
  ddp::DistributedSampler sampler_;
  // TODO(step1): the model lives inside DistributedDataParallel.
  ddp::DistributedDataParallel<ddpw::Model> model_;

  ddp::Loader loader_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  ddp::StopAgreement stop_;
  ddpw::EpochReporter reporter_;
  int64_t epochs_run_ = 0, first_step_ = 0;
};

// TODO(step2): the launcher says who each worker is: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
//   MASTER_PORT (its docs); mpirun OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE (man mpirun). Hint: ddp::env.
// TODO(step1): spawn() starts one worker per device, each as rank `rank` of `world_size`.
int worker(const ddpw::Options& opt, int rank, int world_size) {
  ddp::install_stop_signal_handlers();
  // TODO(step1): who am I: rank `rank` of `world_size`, all on this node; rank 0 serves on localhost.
  ddpw::LaunchValues me;  // who am I: alone, global rank 0 of world size 1, local rank 0
  me.global_rank = me.local_rank = rank;
  me.world_size = me.local_world_size = world_size;
  me.master_addr = "localhost";

  const ddp::LaunchEnv launch = ddpw::check_launch(me, opt);
  const torch::Device device = ddp::choose_device(opt.device, launch.local_rank);
  const int threads = ddpw::configure_compute(opt, launch);
  // TODO(step1): join the process group (Gloo or NCCL), after choosing the device. Hint: ddp::init_process_group.
  auto pg = ddp::init_process_group(launch, device, ddpw::process_group_options(opt));

  ddpw::print_settings(opt, launch, device, threads, launch.global_rank);
  ddpw::print_rank_table(pg.get(), launch, device);  // each rank's host, local rank and device
  Trainer trainer(opt, launch, device, pg);
  return trainer.train();
}

int main(int argc, char** argv) {
  // TODO(step2): the launcher starts one process per device: no spawn, no --nproc (kSpawnOptions).
  // TODO(step1): one worker per visible GPU (else --nproc on the CPU), each running worker(opt, rank,
  //   world_size); wait for them all, like torch.multiprocessing.spawn. Hint: ddp::spawn, workers_per_node.
  const ddpw::Options opt =
      ddpw::parse_options(argc, argv, ddpw::kTrainingOptions | ddpw::kDistributedOptions | ddpw::kSpawnOptions);
  const int world_size = ddp::workers_per_node(opt.device, opt.nproc);  // GPUs visible, else --nproc
  return ddp::spawn(world_size,
                    [&](int rank) { return ddpw::run_main([&] { return worker(opt, rank, world_size); }); });
}
