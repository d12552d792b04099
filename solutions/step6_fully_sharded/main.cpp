// step6_fully_sharded — new since step 4 (TODO(step6)): FSDP (ZeRO-3), no rank keeps the whole model; a GPT.
//   torchrun --standalone --nproc_per_node=2 --no-python step6_fully_sharded 2 1 --model gpt --accumulate 2
#include <torch/torch.h>

#include "course/check_launch.h"  // defines: LaunchValues, check_launch (who am I); job_port (launch_env.h)
#include "course/compute.h"       // defines: configure_compute (threads per rank, --deterministic)
#include "course/kept_memory.h"   // defines: report_memory (a rank's bytes kept); EpochReporter (epoch_report.h)
#include "course/options.h"       // defines: Options, parse_options
#include "course/run_main.h"      // defines: run_main; exit codes (error.h)
#include "course/run_report.h"    // defines: print_settings, print_rank_table
#include "course/workload.h"      // defines: Workload (data, model, optimizer, loss)
#include "ddp/data.h"             // defines: DistributedSampler (the data order), Loader (batches)
#include "ddp/device.h"           // defines: choose_device, visible_gpus
#include "ddp/hostlist.h"         // defines: expand_hostlist (Slurm's node lists)
#include "ddp/stop_agreement.h"   // defines: StopAgreement (all ranks stop at one step on SIGTERM/SIGUSR1)
// TODO(step6): FSDP's model wrapper instead of ZeRO's (start at ddp/fully_sharded.h); the optimizer and snapshots stay.
#include "course/from_options.h"   // defines: adam_options
#include "course/fully_sharded.h"  // defines: FullyShardedModel, fsdp_options, ShardedView
#include "course/zero_settings.h"  // defines: learning_rate_at (DeepSpeed's WarmupLR)

// TODO(step6): one FSDP unit per transformer block (Model::blocks()), the rest (embeddings, final norm, head) in
//   the root unit; resharding and activation checkpointing as the command line says (ddpw::fsdp_options).
ddpw::FullyShardedModel fully_shard(std::shared_ptr<ddpw::Model> model, torch::Device device,
                                    std::shared_ptr<ddp::ProcessGroup> pg, const ddpw::Options& opt) {
  return {model, model->blocks(), std::move(pg), ddpw::fsdp_options(opt, device)};
}

class Trainer {
 public:
  Trainer(const ddpw::Options& opt, const ddp::LaunchEnv& launch, torch::Device device,
          std::shared_ptr<ddp::ProcessGroup> pg)
      : opt_(opt),
        launch_(launch),
        workload_(ddpw::make_workload(opt)),
        // TODO(step1): give each rank its own shard of every epoch's shuffle (as DistributedSampler).
        sampler_(workload_.train.size(), launch.world_size, launch.global_rank, opt.seed),
        // TODO(step6): build the model on the host (CPU) and shard it (fully_shard above): only this rank's shards go
        //   to the device. ZeRO's ShardedAdamW steps on them as before.
        model_(fully_shard(workload_.make_model(torch::kCPU), device, pg, opt)),
        loader_(workload_.train, sampler_, opt.batch_size, device),
        optimizer_(std::make_unique<ddp::ShardedAdamW>(model_, ddpw::adam_options(opt))),
        stop_(pg.get()),
        reporter_(opt, launch, device, workload_, pg.get()) {
    // TODO(step4): every rank reads its shard (all shards with another world size: they reshard).
    if (auto state = ddpw::load_sharded_snapshot(opt, *optimizer_)) {
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
    // TODO(step6): no rank holds the whole model: gather it on rank 0 for the checksum (and --export-weights).
    reporter_.end_training(model_.full_state_dict());
    return ddp::kExitOk;
  }
 private:
  // TODO(step6): evaluation runs through the wrapper (it gathers the units): a ddpw::ShardedView of it.
  ddpw::Model& plain_model() { return view_; }

  torch::Tensor run_batch(const ddp::Batch& batch) {
    optimizer_->zero_grad();
    // TODO(step6): gradient accumulation: --accumulate micro-batches; gradient sync off for all but the last
    //   (model_.set_requires_gradient_sync: they add up locally); the last one's backward reduce-scatters the sum.
    const auto inputs = batch.input.chunk(opt_.accumulate), targets = batch.target.chunk(opt_.accumulate);
    auto loss = torch::zeros({}, batch.input.options());
    for (size_t i = 0; i < inputs.size(); ++i) {
      model_.set_requires_gradient_sync(i + 1 == inputs.size());  // only the last one's backward reduces
      auto part = workload_.loss(model_(inputs[i]), targets[i]) / static_cast<double>(inputs.size());
      part.backward();
      loss += part.detach();
    }
    // TODO(step4): DeepSpeed's gradient_clipping (the norm of all ranks' shards) and WarmupLR, then the step.
    if (opt_.deepspeed.gradient_clipping > 0) optimizer_->clip_grad_norm(opt_.deepspeed.gradient_clipping);
    optimizer_->set_lr(ddpw::learning_rate_at(opt_, optimizer_->steps_taken()));
    optimizer_->step();
    return loss;
  }

  bool run_epoch(int64_t epoch) {  // false when a signal stopped it: the snapshot is then of this step
    sampler_.set_epoch(epoch);     // a new shuffle every epoch, the same for the same seed
    // TODO(step4): the rate now changes every step (run_batch), not every epoch.
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
    if (epoch == epochs_run_) ddpw::report_memory(reporter_, model_, *optimizer_);  // given: what each rank keeps
    return true;
  }

  void save(int64_t epochs_run, int64_t step) {
    // TODO(step4): no rank holds all the optimizer state: every rank writes its shard, rank 0 the manifest.
    ddpw::save_sharded_snapshot(opt_, *optimizer_, {epochs_run, step, launch_.world_size});
    reporter_.announce("Training snapshot saved at {} ({} epochs run, step {})", opt_.snapshot_path, epochs_run, step);
  }

  const ddpw::Options& opt_;
  const ddp::LaunchEnv launch_;
  ddpw::Workload workload_;
  ddp::DistributedSampler sampler_;
  // TODO(step6): the model lives inside FullyShardedDataParallel, evaluation sees it through a ShardedView.
  ddpw::FullyShardedModel model_;
  ddpw::ShardedView view_{model_};
  ddp::Loader loader_;
  std::unique_ptr<ddp::ShardedAdamW> optimizer_;
  ddp::StopAgreement stop_;
  ddpw::EpochReporter reporter_;
  int64_t epochs_run_ = 0, first_step_ = 0;
};

// TODO(step2): the launcher says who each worker is: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
//   MASTER_PORT (its docs); mpirun OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE (man mpirun). Hint: ddp::env.
int worker(const ddpw::Options& opt) {
  ddp::install_stop_signal_handlers();
  ddpw::LaunchValues me;   // who am I: what the launcher says (no launcher: rank 0 of 1)
  if (ddp::env("RANK")) {  // torchrun
    me.global_rank = ddp::env_int("RANK");
    me.local_rank = ddp::env_int("LOCAL_RANK");
    me.world_size = ddp::env_int("WORLD_SIZE");
  } else if (ddp::env("OMPI_COMM_WORLD_RANK")) {  // OpenMPI's mpirun
    me.global_rank = ddp::env_int("OMPI_COMM_WORLD_RANK");
    me.local_rank = ddp::env_int("OMPI_COMM_WORLD_LOCAL_RANK");
    me.world_size = ddp::env_int("OMPI_COMM_WORLD_SIZE");
  }
  me.master_addr = ddp::env("MASTER_ADDR");
  me.master_port = ddp::env_int("MASTER_PORT");
  // TODO(step3): under srun: SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS (man srun, "OUTPUT ENVIRONMENT
  //   VARIABLES"); rank 0 runs on the first node of SLURM_JOB_NODELIST; SLURM_JOB_ID gives the port.
  if (!me.global_rank && ddp::env("SLURM_PROCID")) {  // Slurm's srun
    me.global_rank = ddp::env_int("SLURM_PROCID");
    me.local_rank = ddp::env_int("SLURM_LOCALID");
    me.world_size = ddp::env_int("SLURM_NTASKS");
    if (!me.master_addr) me.master_addr = ddp::expand_hostlist(ddp::env("SLURM_JOB_NODELIST").value()).front();
    if (!me.master_port) me.master_port = ddp::job_port(ddp::env_int("SLURM_JOB_ID").value());
  }

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
  // TODO(step6): FSDP's options: --reshard-after-forward, --checkpoint-activations, --accumulate (ddpw::kFsdpOptions).
  const auto opt =
      ddpw::parse_options(argc, argv, ddpw::kTrainingOptions | ddpw::kDistributedOptions | ddpw::kFsdpOptions);
  return ddpw::run_main([&] { return worker(opt); });
}
