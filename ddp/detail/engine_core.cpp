#include "ddp/detail/engine_core.h"

#include <map>
#include <utility>

#include "ddp/detail/text.h"  // defines: fnv1a
#include "ddp/error.h"
#include "ddp/timeline.h"

namespace ddp {
namespace {

// FNV-1a: a cheap fingerprint of the parameter names and shapes, compared across ranks.
int64_t fingerprint(const std::vector<std::string>& names, const std::vector<torch::Tensor>& params) {
  uint64_t h = detail::kFnv1aBasis;
  auto mix = [&](const std::string& s) { h = detail::fnv1a(s, h); };
  for (size_t i = 0; i < params.size(); ++i) {
    mix(names[i]);
    for (int64_t d : params[i].sizes()) {
      mix(":");
      mix(std::to_string(d));  // (not ":" + ...: GCC 12 warns falsely on that inlined concatenation)
    }
    mix(";");
  }
  return static_cast<int64_t>(h >> 1);
}

constexpr int64_t kBroadcastChunkBytes = 250LL * 1024 * 1024;  // PyTorch's broadcast_bucket_size

}  // namespace

void broadcast_coalesced(const std::vector<torch::Tensor>& tensors, int root, ProcessGroup& pg,
                         const std::string& what) {
  torch::NoGradGuard no_grad;  // in-place writes into leaves that require grad
  // (dtype, device) -> chunks of tensor indices, in the order given; a chunk closes past ~250 MiB.
  std::map<std::pair<int, std::string>, std::vector<std::vector<size_t>>> groups;
  std::map<std::pair<int, std::string>, int64_t> bytes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i];
    if (!t.defined()) continue;
    const std::pair<int, std::string> key{static_cast<int>(t.scalar_type()), t.device().str()};
    auto& chunks = groups[key];
    if (chunks.empty() || bytes[key] >= kBroadcastChunkBytes) {
      chunks.emplace_back();
      bytes[key] = 0;
    }
    chunks.back().push_back(i);
    bytes[key] += t.numel() * static_cast<int64_t>(t.element_size());
  }
  std::vector<std::vector<size_t>> chunks;
  for (auto& group : groups)
    for (auto& chunk : group.second) chunks.push_back(std::move(chunk));
  std::vector<std::vector<torch::Tensor>> flats;  // the backend keeps a reference to each until its work ends
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  flats.reserve(chunks.size());
  for (const auto& chunk : chunks) {
    std::vector<torch::Tensor> pieces;
    for (size_t i : chunk) pieces.push_back(tensors[i].reshape({-1}));
    flats.push_back({torch::cat(pieces)});
    c10d::BroadcastOptions options;
    options.rootRank = root;
    works.push_back(pg.backend().broadcast(flats.back(), options));
  }
  // In order (every rank issued the same broadcasts in the same order); on NCCL this only makes
  // the current stream wait, so the copies below queue behind the broadcasts.
  for (auto& w : works) pg.wait(w, what);
  if (pg.rank() == root) return;
  for (size_t c = 0; c < chunks.size(); ++c) {
    int64_t offset = 0;
    const torch::Tensor& flat = flats[c][0];
    for (size_t i : chunks[c]) {
      const torch::Tensor& t = tensors[i];
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

EngineCore::EngineCore(const std::shared_ptr<torch::nn::Module>& module, std::shared_ptr<ProcessGroup> pg,
                       const std::string& engine)
    : pg_(std::move(pg)) {
  DDP_CHECK(module && pg_, engine + " needs a module and a process group", "create both first");
  for (const auto& item : module->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  DDP_CHECK(!params_.empty(), "the module has no parameter that requires a gradient", "nothing to train");
}

EngineCore::EngineCore(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> pg, const std::string& engine)
    : pg_(std::move(pg)), params_(std::move(params)) {
  DDP_CHECK(pg_, engine + " needs a process group", "create it first (init_process_group)");
  DDP_CHECK(!params_.empty(), engine + " got no parameter tensors", "pass the tensors to train");
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    names_.push_back("params[" + std::to_string(i) + "]");
    DDP_CHECK(p.defined(), names_[i] + " is an undefined tensor", "pass defined tensors");
    DDP_CHECK(p.requires_grad() && p.is_leaf(), names_[i] + " is not a leaf tensor that requires a gradient",
              "pass the parameters themselves (made with requires_grad), not results computed from them");
    for (size_t j = 0; j < i; ++j)
      DDP_CHECK(!p.is_same(params_[j]), names_[i] + " is " + names_[j] + " again", "pass each tensor once");
  }
}

EngineCore::~EngineCore() = default;

void broadcast_model_from_rank0(const std::vector<std::string>& names, const std::vector<torch::Tensor>& params,
                                const std::vector<torch::Tensor>& buffers, ProcessGroup& pg) {
  torch::NoGradGuard no_grad;
  const auto device = params.empty() ? pg.device() : params[0].device();
  auto mine =
      torch::tensor({static_cast<int64_t>(params.size()), fingerprint(names, params)}, torch::kInt64).to(device);
  auto root = mine.clone();
  std::vector<torch::Tensor> meta{root};
  pg.broadcast(meta, 0, "model check (broadcast of rank 0's parameter shapes)");
  auto mismatch = torch::ne(root, mine).any().to(torch::kInt64).reshape({1});
  pg.allreduce_sum(mismatch, "model check (agreement of all ranks)");
  DDP_CHECK(mismatch.item<int64_t>() == 0,
            "the ranks hold different models (parameter names or shapes differ from rank 0's)",
            "every rank must build the same model with the same options");
  std::vector<torch::Tensor> state = params;
  state.insert(state.end(), buffers.begin(), buffers.end());
  broadcast_coalesced(state, 0, pg, "initial broadcast of parameters from rank 0");
}

void EngineCore::broadcast_from_rank0(const std::vector<torch::Tensor>& buffers) {
  broadcast_model_from_rank0(names_, params_, buffers, *pg_);
}

void EngineCore::make_buckets(const BucketStrategy::Layout& layout, BucketStrategy& strategy) {
  DDP_INTERNAL_ASSERT(!schedule_, "EngineCore::make_buckets runs once");
  strategy_ = &strategy;
  keep_gradients_ = layout.keep_gradients;
  for (auto& plan : plan_buckets(params_, layout.bucket_mb)) {
    FlatBucket b;
    b.plan = std::move(plan);
    b.padded_numel = padded_numel(b.plan.numel, layout.pad_to);
    const auto& first = params_[b.plan.params[0]];
    b.world_size = torch::scalar_tensor(static_cast<double>(pg_->size()), first.scalar_type());
    if (keep_gradients_) {
      b.grads = torch::zeros({b.padded_numel}, first.options().requires_grad(false));
      for (size_t slot = 0; slot < b.plan.params.size(); ++slot)
        b.slices.push_back(b.grads.narrow(0, b.plan.offsets[slot], params_[b.plan.params[slot]].numel()));
    }
    buckets_.push_back(std::move(b));
  }
  std::vector<std::vector<size_t>> members;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    buckets_[k].label = "(bucket " + std::to_string(k + 1) + " of " + std::to_string(buckets_.size()) + ")";
    members.push_back(buckets_[k].plan.params);
  }
  BucketSchedule::Steps steps{
      .start =
          [this] {
            strategy_->start();  // first, so that a failure there leaves nothing half-sent
            for (auto& b : buckets_) {
              b.work.reset();
              b.undivided.clear();  // a pass an exception ended may have left some
            }
          },
      .put = [this](size_t i, size_t k, size_t slot) { put(i, k, slot); },
      .launch =
          [this](size_t k) {
            divide(k);
            strategy_->launch(k);
          },
      .wait_for_sent = [this](size_t sent, bool interrupted) { strategy_->wait_for_sent(sent, interrupted); },
      .finish = [this] { strategy_->finish(); },
  };
  schedule_ = std::make_unique<BucketSchedule>(params_, names_, members, std::move(steps),
                                               BucketSchedule::Settings{
                                                   .engine = layout.engine,
                                                   .unused_hint = layout.unused_hint,
                                                   .fill_missing = layout.fill_missing,
                                                   .rank = pg_->rank(),
                                               });
}

// Average = sum over ranks of (grad / world size): Gloo has no AVG. A gradient in a tensor of its
// own is divided on its way into the bucket (the copy it needs anyway). One already in its slice
// (.grad is the slice after point_grads_at, unless zero_grad set it to none) or missing (zero) is
// divided when the bucket is sent: the whole bucket in one kernel when every slot is such, as after
// zero_grad(set_to_none = false) or in no_sync's last pass, not one kernel per parameter. The same
// division of the same values either way, so the same bits. A division by 1 changes nothing and is
// skipped; the padding is zero and stays zero.
void EngineCore::put(size_t i, size_t k, size_t slot) {
  FlatBucket& b = buckets_[k];
  if (!b.grads.defined()) {  // a buffer made per pass: the bucket's first gradient
    strategy_->before_new_buffer(k);
    b.grads = torch::empty({b.padded_numel}, params_[b.plan.params[0]].options().requires_grad(false));
    b.grads.narrow(0, b.plan.numel, b.padded_numel - b.plan.numel).zero_();
  }
  torch::Tensor slice = keep_gradients_ ? b.slices[slot] : b.grads.narrow(0, b.plan.offsets[slot], params_[i].numel());
  const torch::Tensor& grad = params_[i].grad();
  const bool divide = pg_->size() > 1;
  if (!grad.defined()) {
    slice.zero_();
    if (divide) b.undivided.push_back(slot);  // zero either way; counted so that the bucket can go whole
  } else if (grad.data_ptr() != slice.data_ptr()) {
    divide ? torch::div_out(slice, grad.reshape({-1}), b.world_size) : slice.copy_(grad.reshape({-1}));
  } else if (divide) {
    b.undivided.push_back(slot);
  }
  if (!keep_gradients_) params_[i].mutable_grad().reset();  // from here on the bucket holds it
}

void EngineCore::divide(size_t k) {
  FlatBucket& b = buckets_[k];
  if (b.undivided.empty()) return;
  torch::NoGradGuard no_grad;
  if (b.undivided.size() == b.plan.params.size()) {
    b.grads.div_(b.world_size);
  } else {
    for (size_t slot : b.undivided) {
      const int64_t numel = params_[b.plan.params[slot]].numel();
      (keep_gradients_ ? b.slices[slot] : b.grads.narrow(0, b.plan.offsets[slot], numel)).div_(b.world_size);
    }
  }
  b.undivided.clear();
}

// One rank's sum is the rank's own tensors: at world size 1 nothing is sent (no work). c10d's Gloo
// path would hand the identity to its worker thread and back, recording it for the flight recorder
// on the way: measured here, more than the rest of an engine's work in a small model's step.
void EngineCore::allreduce(size_t k) {
  FlatBucket& b = buckets_[k];
  if (pg_->skips_collectives()) return;
  std::vector<torch::Tensor> tensors{b.grads};
  b.work = pg_->allreduce_sum_async(tensors);
  record(k, b.work, "gradient allreduce " + b.label);
}

void EngineCore::record(size_t k, const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const {
  const FlatBucket& b = buckets_[k];
  const auto element = static_cast<int64_t>(params_[b.plan.params[0]].element_size());
  record_collective(work, what, b.padded_numel * element);  // timeline.h
}

void EngineCore::wait(size_t k, const std::string& what) {
  FlatBucket& b = buckets_[k];
  if (b.work) pg_->wait(b.work, what);
  b.work.reset();
}

// The next backward accumulates into the slice in place, or, after zero_grad() set .grad to none,
// into a new tensor that put() copies in.
void EngineCore::point_grads_at(size_t k, const std::vector<char>& keep_undefined) {
  const FlatBucket& b = buckets_[k];
  for (size_t slot = 0; slot < b.plan.params.size(); ++slot) {
    const size_t i = b.plan.params[slot];
    if (!keep_undefined.empty() && keep_undefined[i]) continue;
    torch::Tensor& p = params_[i];
    const int64_t start = b.grads.storage_offset() + b.plan.offsets[slot];
    const auto* where = static_cast<const char*>(b.grads.storage().data()) + start * b.grads.element_size();
    if (p.grad().defined() && p.grad().data_ptr() == where) continue;
    p.mutable_grad() = storage_slice(b.grads, start, p.sizes());
  }
}

}  // namespace ddp
