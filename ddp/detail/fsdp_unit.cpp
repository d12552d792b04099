#include "ddp/detail/fsdp_unit.h"

#include "ddp/timeline.h"  // defines: record_collective

namespace ddp::detail {
namespace {

// A gathered buffer's memory is released and taken again in place (its StorageImpl keeps its
// identity), so the module's parameters, which are views of it, and the tensors autograd saved
// from them, see the data again after the next gather: PyTorch's FSDP frees with
// untyped_storage().resize_(0) for the same reason.
void free_storage(const torch::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

// On the tensor's device, not the thread's current one (the CUDA allocator allocates on the current
// device: PyTorch's resize_ of a storage sets the device first, as here).
void allocate_storage(const torch::Tensor& t) {
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == nbytes) return;
  c10::OptionalDeviceGuard guard(t.device());
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

}  // namespace

void FsdpUnit::make_buffer(const torch::Device& device, const FsdpDtypes& dtypes) {
  torch::NoGradGuard no_grad;
  // The parameters become views of `full`, whose memory exists only while the unit is gathered: its
  // storage gets the unit's size without memory (a null data pointer) for the views to be made, and is
  // emptied after. Nothing is allocated: the construction's peak stays one staging buffer and a shard.
  full = torch::empty({0}, torch::TensorOptions().dtype(dtypes.compute).device(device));
  full.storage().unsafeGetStorageImpl()->set_nbytes(static_cast<size_t>(layout.padded_numel) * full.element_size());
  full.set_(full.storage(), 0, {layout.padded_numel}, {1});
  for (size_t i = 0; i < params.size(); ++i)
    params[i].set_data(full.narrow(0, plan.offsets[i], params[i].numel()).view(layout.shapes[i]));
  free_storage(full);
  gathered_ = Gathered::kNo;
}

void FsdpUnit::start_gather(ProcessGroup& pg, const FsdpDtypes& dtypes) {
  if (gathered_ != Gathered::kNo) return;
  torch::NoGradGuard no_grad;
  allocate_storage(full);
  gather_input_ = shard.detach().to(dtypes.compute);
  gathered_ = Gathered::kInFlight;
  if (pg.skips_collectives()) {  // one rank: a copy (unless the group keeps its collectives)
    full.copy_(gather_input_);
    gather_input_ = torch::Tensor();
    gathered_ = Gathered::kYes;
    return;
  }
  gather_work_ = pg.backend()._allgather_base(full, gather_input_);
  record_collective(gather_work_, "parameter all-gather (" + label() + ")",
                    full.numel() * static_cast<int64_t>(full.element_size()));  // timeline.h
}

void FsdpUnit::finish_gather(ProcessGroup& pg) {
  if (gathered_ != Gathered::kInFlight) return;
  pg.wait(gather_work_, "FullyShardedDataParallel: all-gather of " + label());
  gather_work_.reset();
  gather_input_ = torch::Tensor();
  gathered_ = Gathered::kYes;
}

void FsdpUnit::reshard(ProcessGroup& pg) {
  finish_gather(pg);  // a prefetch in flight writes into the buffer: let it land first
  if (gathered_ != Gathered::kYes) return;
  free_storage(full);
  gathered_ = Gathered::kNo;
}

void FsdpUnit::accumulate_gradients(const FsdpDtypes& dtypes) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    auto& g = params[i].mutable_grad();
    if (!g.defined()) continue;
    if (!accumulated_.defined())
      accumulated_ = torch::zeros({layout.padded_numel}, full.options().dtype(dtypes.reduce));
    accumulated_.narrow(0, plan.offsets[i], params[i].numel()).add_(g.reshape(-1));
    g.reset();
  }
  reduced_ = Reduced::kDone;  // nothing to send in this pass
}

void FsdpUnit::start_reduce(ProcessGroup& pg, const FsdpDtypes& dtypes) {
  torch::NoGradGuard no_grad;
  const bool summed = accumulated_.defined();  // no_sync passes before this one
  reduce_input_ =
      summed ? std::move(accumulated_) : torch::zeros({layout.padded_numel}, full.options().dtype(dtypes.reduce));
  accumulated_ = torch::Tensor();
  for (size_t i = 0; i < params.size(); ++i) {
    auto& g = params[i].mutable_grad();
    if (!g.defined()) continue;
    auto place = reduce_input_.narrow(0, plan.offsets[i], params[i].numel());
    summed ? place.add_(g.reshape(-1)) : place.copy_(g.reshape(-1));
    g.reset();
  }
  reduce_input_.div_(static_cast<double>(pg.size()));
  reduce_output_ = torch::empty({layout.shard_numel}, reduce_input_.options());
  reduce_ = ReduceScatter(pg, reduce_input_, reduce_output_, /*accumulate=*/false);
  record_collective(reduce_.work(), "gradient reduce-scatter (" + label() + ")",
                    reduce_input_.numel() * static_cast<int64_t>(reduce_input_.element_size()));
  reduced_ = Reduced::kInFlight;
}

void FsdpUnit::finish_reduce() {
  if (reduced_ != Reduced::kInFlight) return;
  torch::NoGradGuard no_grad;
  reduce_.finish("FullyShardedDataParallel: reduce-scatter of the gradients of " + label());
  auto& grad = shard.mutable_grad();
  if (grad.defined())
    grad.add_(reduce_output_.to(torch::kFloat32));
  else
    grad = reduce_output_.to(torch::kFloat32);  // float32 already: this tensor, no copy
  reduce_input_ = reduce_output_ = torch::Tensor();
  reduced_ = Reduced::kDone;
}

void FsdpUnit::begin_pass() {
  grads_pending = params.size();
  reduced_ = Reduced::kNo;
}

void FsdpUnit::drop_gradients(bool set_to_none) {
  auto& g = shard.mutable_grad();
  if (set_to_none)
    g.reset();
  else if (g.defined())
    g.zero_();
  for (auto& p : params) p.mutable_grad().reset();
  accumulated_ = torch::Tensor();
}

int64_t FsdpUnit::gathered_bytes() const { return static_cast<int64_t>(full.storage().nbytes()); }

int64_t FsdpUnit::full_gradient_bytes() const {
  int64_t bytes = bytes_of(accumulated_);
  for (const auto& p : params) bytes += bytes_of(p.grad());
  return bytes;
}

}  // namespace ddp::detail
