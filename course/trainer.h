// defines: Trainer — PyTorch Lightning's idea in C++: what steps 0-4 wrote by hand, behind one object.
//          trainer.fit(make_workload) starts or joins the ranks (torchrun, mpirun, srun; with no launcher
//          `--gpus N` starts N workers here, as step 1), picks the device, joins the process group, prints
//          the settings and rank tables, wraps the model for the strategy the options chose (single, ddp,
//          zero1, zero2), trains the epochs (stop signals agreed, a snapshot every --save-every epochs,
//          resumed from it), and prints and checks the final weights (--metrics, --export-weights).
//
//   const auto opt = ddpw::parse_options(argc, argv, ddpw::kTrainingOptions | ddpw::kTrainerOptions);
//   return ddpw::run_main([&] { return ddpw::Trainer(opt).fit(ddpw::make_workload); });
#pragma once

#include <functional>

#include "course/check_launch.h"
#include "course/options.h"
#include "course/trainer_launch.h"
#include "course/workload.h"
#include "ddp/launch_env.h"

namespace ddpw {

// What fit() trains: Lightning's LightningModule and DataModule in one (the data, the model, its
// optimizer and loss, the learning rate per epoch). The course's is ddpw::make_workload. Called once
// per rank, after the rank joined the process group. The ZeRO strategies step ddp::ShardedAdamW (AdamW,
// DeepSpeed's config) instead of the workload's optimizer, as step 4 does.
using WorkloadFactory = std::function<Workload(const Options& options)>;

class Trainer {
 public:
  // Keeps a copy of the options. Reads the launcher (resolve_launch_env) and checks the strategy,
  // --gpus and --nodes against it (plan_trainer_launch): a bad combination is a ddp::Error naming
  // the fix, before any rank waits.
  explicit Trainer(const Options& options);

  // Trains; returns the exit code: kExitOk when all epochs ran, kExitRequeue when a stop signal
  // (SIGTERM, SIGUSR1) stopped every rank at one step after a snapshot. A process that starts
  // workers (no launcher, --gpus N > 1) returns what spawn() says of them.
  int fit(const WorkloadFactory& make_workload);

  const std::string& strategy() const { return options_.strategy; }
  const TrainerLaunch& plan() const { return plan_; }

 private:
  int train_rank(const LaunchValues& me, const WorkloadFactory& make_workload);

  const Options options_;  // a copy: the reporter and the snapshots refer to it while fit() runs
  ddp::LaunchEnv seen_;    // the launcher's own description of this process
  TrainerLaunch plan_;
};

}  // namespace ddpw
