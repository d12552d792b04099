#include "course/kept_memory.h"

#include <fmt/format.h>

#include "ddp/adadelta.h"
#include "ddp/error.h"

namespace ddpw {

namespace {

int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// One parameter's optimizer state: the tensors of the state types the course's programs use.
int64_t state_bytes(const torch::optim::OptimizerParamState& state) {
  if (const auto* s = dynamic_cast<const ddp::AdadeltaParamState*>(&state))
    return bytes_of(s->square_avg()) + bytes_of(s->acc_delta());
  if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&state)) return bytes_of(s->momentum_buffer());
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&state))
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&state))
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  throw ddp::Error("kept_bytes: an optimizer state of a type it does not know",
                   "use SGD, Adam, AdamW or ddp::Adadelta, or add the type to course/kept_memory.cpp");
}

}  // namespace

KeptBytes kept_bytes(torch::nn::Module& model, const torch::optim::Optimizer& optimizer, std::string how) {
  KeptBytes kept;
  kept.how = std::move(how);
  for (const auto& p : model.parameters()) {
    kept.parameters += bytes_of(p);
    kept.gradients += bytes_of(p.grad());
  }
  for (const auto& [key, state] : optimizer.state()) kept.optimizer_state += state_bytes(*state);
  return kept;
}

KeptBytes kept_bytes(ddp::DistributedDataParallel<Model>& model, const torch::optim::Optimizer& optimizer) {
  return kept_bytes(*model.module(), optimizer, "DDP: every rank keeps all of it");
}

KeptBytes kept_bytes(ddp::ZeroDataParallel<Model>& model, const ddp::ShardedAdamW& optimizer) {
  KeptBytes kept;
  const auto& reducer = *model.reducer();
  for (const auto& b : reducer.buckets()) {
    kept.parameters += bytes_of(b.params);  // the module's parameters are views into these
    kept.gradients += bytes_of(b.grads) + bytes_of(b.grad_shard);
  }
  kept.optimizer_state = optimizer.state_bytes();
  const int world = model.reducer()->process_group().size();
  kept.how = fmt::format("ZeRO-{} over {} rank{}", reducer.stage(), world, world == 1 ? "" : "s");
  return kept;
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 10000) return fmt::format("{} B", bytes);
  if (bytes < 1000000) return fmt::format("{:.1f} kB", static_cast<double>(bytes) / 1e3);
  return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6);
}

void report_memory(const EpochReporter& reporter, const KeptBytes& kept) {
  reporter.print("kept between steps: optimizer state {}, gradients {}, parameters {} ({})",
                 format_bytes(kept.optimizer_state), format_bytes(kept.gradients), format_bytes(kept.parameters),
                 kept.how);
}

}  // namespace ddpw
