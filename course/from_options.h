// defines: the course's command line turned into the library's settings: ddp_options,
//          zero_options, adam_options, process_group_options, and the snapshots of a program
//          (save/load_snapshot, save/load_sharded_snapshot at --snapshot, recording the program and
//          dataset that wrote them, refusing another's; --fresh starts over).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "course/deepspeed_config.h"
#include "course/options.h"
#include "ddp/cuda_graph_step.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/grad_scaler.h"
#include "ddp/multi_tensor_adam.h"
#include "ddp/process_group.h"
#include "ddp/sharded_snapshot.h"
#include "ddp/snapshot.h"
#include "ddp/zero_data_parallel.h"

namespace ddpw {

// --bucket-mb, --find-unused-parameters and --bf16-compress. A run asked for ZeRO (--zero, --deepspeed-config), or step
// 4's exercise started as several ranks, is an error naming TODO(step4): it would train without ZeRO.
ddp::DdpOptions ddp_options(const Options& options);

// The stage (--zero, or the trainer's --strategy zero1|zero2) and --bucket-mb (or ds_config.json's
// reduce_bucket_size). A program that did not offer the ZeRO options (kZeroOptions) gets an error.
ddp::ZeroOptions zero_options(const Options& options);

// --precision fp16's GradScaler: PyTorch's defaults, or ds_config.json's fp16 loss scaler
// (loss_scale_config, zero_settings.h); disabled for fp32 and bf16.
ddp::GradScalerOptions grad_scaler_options(const Options& options);

// The optimizer section of a ds_config.json.
ddp::AdamOptions adam_options(const AdamConfig& config);
// A ZeRO program's: ds_config.json's optimizer, else AdamW's defaults; --lr wins (zero_settings.h).
ddp::AdamOptions adam_options(const Options& options);

// What --cuda-graph's capture must know of the run (CudaGraphStep::check refuses the rest): the
// device, the process group's backend (none for single), ddp_options, --precision's autocast and
// GradScaler. A ZeRO strategy (--zero, zero1/zero2) is an error here: its step is not captured.
ddp::CaptureContext capture_context(const Options& options, torch::Device device, const ddp::ProcessGroup* pg);

// The process-group settings of the command line (--backend, --*-timeout).
ddp::ProcessGroupOptions process_group_options(const Options& options);

// The writer and dataset a snapshot records: options.program's label ("step2_env_launch (solution)"),
// options.dataset.
ddp::SnapshotOwner snapshot_owner(const Options& options);

// At --snapshot (options.snapshot_path), with --seed and snapshot_owner(options) (snapshot.h).
void save_snapshot(const Options& options, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                   const ddp::TrainingState& state);
// nullopt with --fresh or when --snapshot does not exist; another program's snapshot (another step,
// the exercise for the solution, another dataset) is refused, naming both (snapshot.h).
std::optional<ddp::TrainingState> load_snapshot(const Options& options, torch::nn::Module& model,
                                                torch::optim::Optimizer& optimizer, int64_t world_size);

// The same for ZeRO's sharded snapshots (sharded_snapshot.h); collective, as those.
void save_sharded_snapshot(const Options& options, ddp::ShardedAdamW& optimizer, const ddp::TrainingState& state);
std::optional<ddp::TrainingState> load_sharded_snapshot(const Options& options, ddp::ShardedAdamW& optimizer);

}  // namespace ddpw
