// step5_trainer — everything behind one object (PyTorch Lightning's idea): the strategy is a flag.
//
//   torchrun --standalone --nproc_per_node=2 --no-python step5_trainer --epochs 50 --strategy ddp
//   step5_trainer --epochs 50 --gpus 2 --strategy zero2         # no launcher: starts 2 workers itself
//   srun step5_trainer --epochs 50 --gpus 4 --nodes 2           # clusters/puhti/step5.sbatch
//
// New in step 5 (TODO(step5)): nothing of steps 0-4 is on screen any more. ddpw::Trainer reads the
// launcher (torchrun, mpirun, srun) or starts the workers, picks the device, joins the process group,
// wraps the model for --strategy single|ddp|zero1|zero2, trains, snapshots, resumes and reports;
// AFTER.md maps where each line of steps 0-4 went. What stays is what you train: the workload.
#include "course/options.h"   // defines: Options, parse_options
#include "course/run_main.h"  // defines: run_main; exit codes (error.h)
#include "course/trainer.h"   // defines: Trainer (fit: the strategy, launcher, loop, snapshots of steps 0-4)
#include "course/workload.h"  // defines: make_workload (data, model, optimizer, loss: what is trained)

int main(int argc, char** argv) {
  // TODO(step5): Lightning's Trainer options on the command line: --strategy, --gpus/--devices,
  //   --nodes/--num-nodes, --epochs/--max-epochs, --deepspeed-config (ddpw::kTrainerOptions).
  const ddpw::Options opt = ddpw::parse_options(argc, argv, ddpw::kTrainingOptions);

  return ddpw::run_main([&] {
    ddpw::Trainer trainer(opt);  // Lightning: Trainer(strategy=..., devices=..., num_nodes=..., max_epochs=...)
    // TODO(step5): fit the course's workload (Lightning's LightningModule and DataModule in one: the data,
    //   the model, its optimizer and loss), ddpw::make_workload; fit returns the exit code.
    return trainer.fit(nullptr);
  });
}
