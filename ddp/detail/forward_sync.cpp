#include "ddp/detail/forward_sync.h"

#include <string>
#include <utility>

#include "ddp/detail/engine_core.h"  // defines: broadcast_coalesced
#include "ddp/error.h"
#include "ddp/sync_batch_norm.h"

namespace ddp {

ForwardSync::ForwardSync(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                         bool broadcast_buffers)
    : module_(std::move(module)), pg_(std::move(pg)), enabled_(broadcast_buffers) {
  DDP_CHECK(module_ && pg_, "DistributedDataParallel needs a module and a process group", "create both first");
  give_group_to_sync_batchnorm(*module_, pg_);
  has_buffers_ = !buffers().empty();
  if (!enabled_ || !has_buffers_) return;  // nothing to broadcast, nothing to check
  versions_after_forward_ = versions();
  std::vector<torch::Tensor> trainable;
  for (const auto& p : module_->parameters(/*recurse=*/true))
    if (p.requires_grad()) trainable.push_back(p);
  hooks_ = std::make_unique<GradientHooks>(trainable, [this](size_t) { on_gradient(); });
}

ForwardSync::~ForwardSync() = default;

std::vector<torch::Tensor> ForwardSync::buffers() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : module_->buffers(/*recurse=*/true))
    if (b.defined()) out.push_back(b);
  return out;
}

std::vector<int64_t> ForwardSync::versions() const {
  std::vector<int64_t> out;
  for (const auto& b : buffers()) out.push_back(b._version());
  return out;
}

bool ForwardSync::will_broadcast() const { return enabled_ && has_buffers_ && next_forward_broadcasts_; }

void ForwardSync::before_forward() {
  // Buffers may have been registered anew since construction (PyTorch collects them each time too).
  if (enabled_ && !has_buffers_) has_buffers_ = !buffers().empty();
  if (will_broadcast()) broadcast_buffers();
}

void ForwardSync::after_forward(bool backward_will_sync) {
  next_forward_broadcasts_ = torch::GradMode::is_enabled() && backward_will_sync;
  if (hooks_) versions_after_forward_ = versions();
}

void ForwardSync::broadcast_buffers() {
  if (pg_->skips_collectives()) return;  // nothing to send (as the gradient reducer)
  broadcast_buffers_from(source_ ? source_() : 0);
}

// Rank root's buffers to every rank: one flat tensor per dtype and device, one broadcast each.
void ForwardSync::broadcast_buffers_from(int root) {
  if (pg_->skips_collectives()) return;
  broadcast_coalesced(buffers(), root, *pg_,
                      "broadcast of rank " + std::to_string(root) + "'s buffers before the forward");
}

void ForwardSync::on_gradient() {
  // Once per backward pass; a pass that ended by an exception never ran its end callback.
  if (in_backward_ && !abandoned_->load()) return;
  in_backward_ = true;
  abandoned_ = hooks_->call_at_end_of_backward([this] { in_backward_ = false; });
  if (versions() == versions_after_forward_) return;
  // Thrown here, at the first gradient of the pass: on every rank (each ran the same forward),
  // and, since these hooks run before the gradient reducer's, before any gradient is sent.
  throw Error(
      "a forward changed the module's buffers (BatchNorm's running statistics) without going through "
      "DistributedDataParallel, so rank 0's buffers were not broadcast before it and the ranks' "
      "statistics drift apart",
      "call the wrapper, ddp_model(x) or ddp_model.forward(x), not ddp_model->forward(x) (operator-> reaches "
      "the plain module); or construct it with broadcast_buffers = false to keep each rank's own buffers");
}

}  // namespace ddp
