// defines: plan_trainer_launch — how the trainer's processes come about (Lightning's Trainer(devices,
//          num_nodes, strategy) against what a launcher started): the strategy must fit the ranks,
//          --gpus and --nodes must be what torchrun, mpirun or srun started (an error names the fix),
//          and with no launcher `--gpus N` (N > 1) means the trainer starts N workers itself, as
//          step 1 does (spawn.h). Plain C++: no LibTorch, so it is unit-tested on its own.
#pragma once

#include <string>

#include "course/options.h"
#include "ddp/launch_env.h"

namespace ddpw {

struct TrainerLaunch {
  int spawn_workers = 0;  // > 0: no launcher started ranks; the trainer starts this many on this node
};

// `seen`: resolve_launch_env's reading of this process's environment; `visible_gpus`: CUDA devices
// this process sees (0 on the CPU or with --device cpu). Throws ddp::Error naming the fix for:
// options without the trainer's (no kTrainerOptions: strategy empty), --strategy single with
// several ranks, --gpus or --nodes other than what the launcher started, --nodes > 1 without a
// launcher, more workers than GPUs.
TrainerLaunch plan_trainer_launch(const Options& options, const ddp::LaunchEnv& seen, int visible_gpus);

}  // namespace ddpw
