#include "course/trainer_launch.h"

#include "ddp/error.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

// How to start G processes per node, or N nodes, with the launcher that started this one.
std::string per_node_fix(const std::string& launcher, int gpus) {
  const std::string g = std::to_string(gpus);
  if (launcher == "openmpi") return "mpirun -np " + g + " on one node (or --map-by ppr:" + g + ":node)";
  if (launcher == "slurm") return "#SBATCH --ntasks-per-node=" + g + " (one task per GPU: --gpus-per-node=" + g + ")";
  return "torchrun --nproc_per_node=" + g;
}
std::string nodes_fix(const std::string& launcher, int nodes) {
  const std::string n = std::to_string(nodes);
  if (launcher == "openmpi") return "mpirun with a hostfile of " + n + " nodes";
  if (launcher == "slurm") return "#SBATCH --nodes=" + n;
  return "torchrun --nnodes=" + n + " on each of the " + n + " nodes";
}

}  // namespace

TrainerLaunch plan_trainer_launch(const Options& o, const LaunchEnv& seen, int visible_gpus) {
  const ProgramId& p = o.program;
  if (o.strategy.empty())
    throw Error(
        p.label() + " calls the trainer, but its options carry no strategy",
        p.kind == "exercise" && p.step == 5
            ? "complete TODO(step5) in " + p.name + "/main.cpp: offer Lightning's options (ddpw::kTrainerOptions)"
            : "parse the command line with ddpw::kTrainingOptions | ddpw::kTrainerOptions");
  const bool zero = o.strategy == "zero1" || o.strategy == "zero2";
  DDP_CHECK(o.strategy == "single" || o.strategy == "ddp" || zero, "unknown strategy '" + o.strategy + "'",
            "use --strategy single, ddp, zero1 or zero2");
  DDP_CHECK(!zero || o.zero_stage == o.strategy.back() - '0',
            "--strategy " + o.strategy + " but the options carry ZeRO stage " + std::to_string(o.zero_stage),
            "parse the command line with ddpw::parse_options (it sets the stage from --strategy)");
  const std::string l = seen.launcher;
  if (seen.world_size > 1) {  // a launcher started the ranks: --gpus and --nodes only check them
    const std::string started = l + " started " + std::to_string(seen.world_size) + " ranks, " +
                                std::to_string(seen.local_world_size) + " on this node";
    if (o.strategy == "single")
      throw Error("--strategy single trains in one process, but " + started,
                  "use --strategy ddp, zero1 or zero2 (or auto), or start one process");
    if (o.gpus > 0 && o.gpus != seen.local_world_size)
      throw Error("--gpus " + std::to_string(o.gpus) + ", but " + started,
                  "leave out --gpus (the trainer takes what the launcher started), give --gpus " +
                      std::to_string(seen.local_world_size) + ", or start " + std::to_string(o.gpus) +
                      " per node: " + per_node_fix(l, o.gpus));
    const int nodes = seen.world_size / seen.local_world_size;
    if (o.nodes > 0 && (o.nodes != nodes || seen.world_size % seen.local_world_size != 0))
      throw Error(
          "--nodes " + std::to_string(o.nodes) + ", but " + started + " (" + std::to_string(nodes) + " node(s))",
          "leave out --nodes, or start " + std::to_string(o.nodes) + " nodes: " + nodes_fix(l, o.nodes));
    return {};
  }
  // One process (no launcher, or one srun task): Lightning's devices=N starts the workers here.
  if (o.nodes > 1)
    throw Error("--nodes " + std::to_string(o.nodes) + ", but no launcher started processes on other nodes",
                "start the trainer on every node with srun (clusters/puhti/step5.sbatch) or " +
                    nodes_fix("torchrun", o.nodes) + ", or leave out --nodes");
  if (o.gpus <= 1) return {};
  if (o.strategy == "single")
    throw Error("--strategy single trains in one process, but --gpus " + std::to_string(o.gpus) + " asks for " +
                    std::to_string(o.gpus),
                "use --strategy ddp, zero1 or zero2 (or auto), or leave out --gpus");
  if (o.device != "cpu" && visible_gpus > 0 && o.gpus > visible_gpus)
    throw Error(
        "--gpus " + std::to_string(o.gpus) + ", but this process sees " + std::to_string(visible_gpus) + " GPU(s)",
        "give --gpus " + std::to_string(visible_gpus) + " or fewer, or --device cpu to train on the CPU");
  return {o.gpus};
}

}  // namespace ddpw
