#include "course/from_options.h"

#include <cmath>

#include "course/zero_settings.h"
#include "ddp/error.h"
#include "ddp/launch_env.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on

DdpOptions ddp_options(const Options& o) {
  if (o.zero_stage > 0) {
    const ProgramId& p = o.program;
    throw Error(p.label() + " was asked for ZeRO stage " + std::to_string(o.zero_stage) +
                    (o.deepspeed_config_path.empty() ? "" : " (--deepspeed-config " + o.deepspeed_config_path + ")") +
                    ", but it wraps the model in DistributedDataParallel, which keeps the whole optimizer state on "
                    "every rank",
                p.kind == "exercise" && p.step == 4
                    ? "complete TODO(step4) in " + p.name +
                          "/main.cpp: wrap the model in ddp::ZeroDataParallel "
                          "(ddp/zero_data_parallel.h) and step a ddp::ShardedAdamW"
                    : "train with ZeRO in step4_sharded, or step5_trainer --strategy zero2");
  }
  // Step 4's exercise as shipped is step 3's DDP program. One process has nothing to shard, so it runs;
  // several ranks would each keep the whole optimizer state, which is what the step is about to remove.
  if (o.program.kind == "exercise" && o.program.step == 4) {
    int world = 1;
    try {
      world = resolve_launch_env(current_environment(), launch_overrides(o)).world_size;
    } catch (const Error&) {
      // check_launch, which the program called first, accepted this launch: not reached
    }
    if (world > 1)
      throw Error(o.program.label() + " was started as " + std::to_string(world) +
                      " ranks, but wraps the model in DistributedDataParallel: every rank would keep the whole "
                      "optimizer state, the copy that ZeRO shards",
                  "complete TODO(step4) in " + o.program.name +
                      "/main.cpp: wrap the model in ddp::ZeroDataParallel "
                      "(ddp/zero_data_parallel.h) and step a ddp::ShardedAdamW; or run it as one process");
  }
  DdpOptions d;
  d.bucket_mb = o.bucket_mb;
  d.find_unused_parameters = o.find_unused_parameters;
  d.bf16_compress = o.bf16_compress;
  return d;
}

ZeroOptions zero_options(const Options& o) {
  DDP_CHECK(o.zero_stage == 1 || o.zero_stage == 2,
            o.program.label() + " trains with ZeRO, but its options carry no ZeRO stage",
            "parse the command line with ddpw::kZeroOptions (--zero 1|2, --deepspeed-config)");
  DDP_CHECK(!o.bf16_compress, "--bf16-compress applies to DistributedDataParallel's allreduce, not to ZeRO's",
            "leave it out (ZeRO reduce-scatters in the gradients' dtype)");
  ZeroOptions z;
  z.stage = o.zero_stage;
  z.bucket_mb = o.bucket_mb;
  return z;
}

GradScalerOptions grad_scaler_options(const Options& o) {
  GradScalerOptions g;
  g.enabled = o.precision == "fp16";
  const LossScaleConfig l = loss_scale_config(o);
  g.dynamic = l.loss_scale == 0;
  g.init_scale = g.dynamic ? std::ldexp(1.0, static_cast<int>(l.initial_scale_power)) : l.loss_scale;
  g.growth_interval = l.loss_scale_window;
  g.hysteresis = l.hysteresis;
  g.min_scale = l.min_loss_scale;
  return g;  // growth x2, backoff x0.5: PyTorch's, and DeepSpeed's fixed scale_factor 2
}

AdamOptions adam_options(const AdamConfig& c) {
  return {c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, c.decoupled_weight_decay};
}

AdamOptions adam_options(const Options& o) { return adam_options(adam_config(o)); }

CaptureContext capture_context(const Options& o, torch::Device device, const ProcessGroup* pg) {
  DDP_CHECK(o.zero_stage == 0,
            "--cuda-graph captures the single and ddp strategies' step; ZeRO stage " + std::to_string(o.zero_stage) +
                "'s is not captured",
            "use --strategy ddp (or single) with --cuda-graph, or leave out --cuda-graph");
  CaptureContext context;
  context.device = device;
  context.backend = pg ? pg->backend_name() : "";
  if (pg) context.ddp = ddp_options(o);
  context.autocast = o.precision != "fp32";
  context.grad_scaler = o.precision == "fp16";
  return context;
}

ProcessGroupOptions process_group_options(const Options& o) {
  ProcessGroupOptions p;
  p.backend = o.backend;
  p.rendezvous_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.rendezvous_timeout_s * 1000));
  p.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  p.check_collectives = o.check_collectives;
  return p;
}

SnapshotOwner snapshot_owner(const Options& o) {
  SnapshotOwner owner;
  // The label snapshots written before it carried as a name and a variant ("step2_env_launch
  // (solution)"), so that those still resume.
  const auto& p = o.program;
  owner.writer = p.kind.empty() || p.kind == "program" ? p.name : p.name + " (" + p.kind + ")";
  owner.dataset = o.dataset;
  return owner;
}

void save_snapshot(const Options& o, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                   const TrainingState& state) {
  ddp::save_snapshot(o.snapshot_path, model, optimizer, state, snapshot_owner(o), o.seed);
}

std::optional<TrainingState> load_snapshot(const Options& o, torch::nn::Module& model,
                                           torch::optim::Optimizer& optimizer, int64_t world_size) {
  if (o.fresh) return std::nullopt;  // the file stays until the first save replaces it
  return ddp::load_snapshot(o.snapshot_path, model, optimizer, world_size, snapshot_owner(o));
}

void save_sharded_snapshot(const Options& o, ShardedAdamW& optimizer, const TrainingState& state) {
  ddp::save_sharded_snapshot(o.snapshot_path, optimizer, state, snapshot_owner(o));
}

std::optional<TrainingState> load_sharded_snapshot(const Options& o, ShardedAdamW& optimizer) {
  if (o.fresh) return std::nullopt;  // the files stay until the first save replaces them
  return ddp::load_sharded_snapshot(o.snapshot_path, optimizer, snapshot_owner(o));
}

}  // namespace ddpw
