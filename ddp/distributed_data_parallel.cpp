#include "ddp/distributed_data_parallel.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "ddp/error.h"

namespace ddp {
namespace {

// FNV-1a: a cheap fingerprint of the parameter names and shapes, compared across ranks.
int64_t fingerprint(const std::vector<std::string>& names, const std::vector<torch::Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
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

// A tensor of `sizes` (contiguous) on `flat`'s memory from element `start`. Made with set_(),
// not narrow()/view(): autograd marks views, and the optimizers' zero_grad() calls detach_() on
// .grad, which refuses views ("Can't detach views in-place").
torch::Tensor storage_slice(const torch::Tensor& flat, int64_t start, torch::IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  auto t = torch::empty({0}, flat.options());
  t.set_(flat.storage(), start, sizes, strides);
  return t;
}

}  // namespace

GradientReducer::GradientReducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                                 DdpOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  DDP_CHECK(module_ && pg_, "DistributedDataParallel needs a module and a process group", "create both first");
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  DDP_CHECK(!params_.empty(), "the module has no parameter that requires a gradient", "nothing to train");
  broadcast_initial_state(options_.broadcast_buffers);
  build_buckets(options_.bucket_mb);

  // A post-hook on each parameter's gradient accumulator runs after .grad holds the final sum
  // (a hook on the parameter itself would see the incoming gradient before accumulation).
  std::weak_ptr<int> alive = alive_;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i, alive](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (!alive.expired()) on_gradient_ready(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::broadcast_initial_state(bool with_buffers) {
  torch::NoGradGuard no_grad;  // in-place writes into leaves that require grad
  // Same model on every rank? A different layer size would otherwise hang or corrupt.
  auto mine = torch::tensor({static_cast<int64_t>(params_.size()), fingerprint(names_, params_)}, torch::kInt64)
                  .to(params_[0].device());
  auto root = mine.clone();
  std::vector<torch::Tensor> meta{root};
  pg_->broadcast(meta, 0, "model check (broadcast of rank 0's parameter shapes)");
  auto mismatch = torch::ne(root, mine).any().to(torch::kInt64).reshape({1});
  pg_->allreduce_sum(mismatch, "model check (agreement of all ranks)");
  DDP_CHECK(mismatch.item<int64_t>() == 0,
            "the ranks hold different models (parameter names or shapes differ from rank 0's)",
            "every rank must build the same model with the same options");

  std::vector<torch::Tensor> state = params_;
  if (with_buffers)
    for (const auto& b : module_->buffers(/*recurse=*/true)) state.push_back(b);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::vector<torch::Tensor>> inputs;
  inputs.reserve(state.size());
  for (auto& t : state) {
    inputs.push_back({t});
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    works.push_back(pg_->backend().broadcast(inputs.back(), bo));
  }
  for (auto& w : works) pg_->wait(w, "initial broadcast of parameters from rank 0");
}

void GradientReducer::build_buckets(double bucket_mb) {
  // As PyTorch's DDP: the first bucket is small (1 MiB, or less if bucket_mb is), so the first
  // allreduce starts early in backward; a bucket closes once it holds at least its cap, so a big
  // tensor closes the bucket it joins instead of waiting in the next one.
  const auto cap = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  const int64_t first_cap = std::min<int64_t>(cap, 1024 * 1024);
  bucket_of_.assign(params_.size(), 0);
  // Gradients become ready roughly in reverse registration order: bucket the last layers first.
  Bucket current;
  int64_t bytes = 0, numel = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    current.flat = torch::zeros({numel}, params_[current.params[0]].options().requires_grad(false));
    current.world_size = torch::scalar_tensor(static_cast<double>(pg_->size()), current.flat.scalar_type());
    current.pending = current.params.size();
    buckets_.push_back(std::move(current));
    current = Bucket{};
    bytes = numel = 0;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    const bool other_kind = !current.params.empty() && (p.scalar_type() != params_[current.params[0]].scalar_type() ||
                                                        p.device() != params_[current.params[0]].device());
    if (other_kind) close();
    bucket_of_[k] = buckets_.size();
    current.params.push_back(k);
    current.offsets.push_back(numel);
    numel += p.numel();
    bytes += p.numel() * p.element_size();
    if (bytes >= (buckets_.empty() ? first_cap : cap)) close();
  }
  close();
  ready_.assign(params_.size(), 0);
}

void GradientReducer::start_backward() {
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  next_bucket_ = 0;
  // The callback runs once the whole backward pass is done, before backward() returns. If an
  // exception ends the pass first, the engine drops the callback unrun: the watch it carries then
  // marks this pass abandoned (each pass has its own flag, so a late drop cannot touch the next).
  struct Watch {
    explicit Watch(std::shared_ptr<std::atomic<bool>> flag) : abandoned(std::move(flag)) {}
    Watch(const Watch&) = delete;  // a copy's destructor would raise the flag
    Watch& operator=(const Watch&) = delete;
    ~Watch() {
      if (!ran) abandoned->store(true);
    }
    std::shared_ptr<std::atomic<bool>> abandoned;
    bool ran = false;
  };
  abandoned_ = std::make_shared<std::atomic<bool>>(false);
  auto watch = std::make_shared<Watch>(abandoned_);
  std::weak_ptr<int> alive = alive_;
  torch::autograd::Engine::get_default_engine().queue_callback([this, alive, watch] {
    watch->ran = true;
    if (!alive.expired()) finish_backward();
  });
  in_backward_ = true;
}

void GradientReducer::recover_from_abandoned_backward() {
  // Let the allreduces already started finish before their memory is reused: the other ranks
  // pair them with their own buckets of the same index.
  const size_t sent = next_bucket_;
  for (size_t k = 0; k < sent; ++k) pg_->wait(buckets_[k].work, "gradient allreduce of an interrupted backward");
  in_backward_ = false;
  next_bucket_ = 0;
  if (sent > 0)
    throw Error("a backward pass on rank " + std::to_string(pg_->rank()) + " ended part-way, after " +
                    std::to_string(sent) + " of " + std::to_string(buckets_.size()) +
                    " gradient buckets had been sent: the ranks are out of step",
                "do not catch an error from backward() and go on; end the run (a restart resumes from the "
                "last snapshot). Every rank must run the same backward passes");
}

void GradientReducer::on_gradient_ready(size_t i) {
  if (!sync_enabled_) return;  // no_sync(): accumulate locally
  // An accumulator fires once per backward pass: a second report means the earlier pass never
  // reached its end (an exception inside backward).
  if (in_backward_ && (abandoned_->load() || ready_[i])) recover_from_abandoned_backward();
  if (!in_backward_) start_backward();
  const torch::Tensor& grad = params_[i].grad();
  DDP_CHECK(grad.defined() && !grad.is_sparse(), "parameter '" + names_[i] + "' has no dense gradient",
            "DistributedDataParallel supports dense gradients only");
  if (put_into_bucket(i) == 0) launch_ready_buckets();
}

// Average = sum over ranks of (grad / world size): Gloo has no AVG. Dividing on the way into the
// bucket saves a pass. After the first step .grad usually is this very slice (see finish_backward).
// A parameter without .grad enters as zero. Returns the bucket's count of parameters still missing.
size_t GradientReducer::put_into_bucket(size_t i) {
  ready_[i] = 1;
  Bucket& b = buckets_[bucket_of_[i]];
  const auto slot = std::find(b.params.begin(), b.params.end(), i) - b.params.begin();
  auto slice = b.flat.narrow(0, b.offsets[slot], params_[i].numel());
  const torch::Tensor& grad = params_[i].grad();
  if (!grad.defined())
    slice.zero_();
  else if (grad.data_ptr() == slice.data_ptr())
    slice.div_(b.world_size);
  else
    torch::div_out(slice, grad.reshape({-1}), b.world_size);
  return --b.pending;
}

void GradientReducer::launch_ready_buckets() {
  // Strictly in bucket order: every rank must issue the same collectives in the same order.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    std::vector<torch::Tensor> tensors{b.flat};
    b.work = pg_->allreduce_sum_async(tensors);
  }
}

void GradientReducer::finish_backward() {
  in_backward_ = false;
  torch::NoGradGuard no_grad;
  std::vector<char> keep_undefined(params_.size(), 0);
  if (options_.find_unused_parameters) {
    // Which parameters have a gradient on any rank (PyTorch's "local used map"): one that has none
    // anywhere keeps .grad undefined. Taken before the buckets fill the gaps with zeros.
    std::vector<int32_t> mine(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) mine[i] = params_[i].grad().defined() ? 1 : 0;
    auto has_grad = torch::tensor(mine, torch::kInt32).to(params_[0].device());
    if (next_bucket_ < buckets_.size()) {
      // A parameter without a gradient in this pass enters as its accumulated .grad (earlier
      // no_sync passes), or as zero.
      for (size_t i = 0; i < params_.size(); ++i)
        if (!ready_[i]) put_into_bucket(i);
      launch_ready_buckets();
    }
    std::vector<torch::Tensor> mask{has_grad};
    pg_->wait(pg_->allreduce_sum_async(mask), "allreduce of which parameters have gradients");
    const auto anywhere = has_grad.cpu();
    const auto counts = anywhere.accessor<int32_t, 1>();
    for (size_t i = 0; i < params_.size(); ++i) keep_undefined[i] = counts[static_cast<int64_t>(i)] == 0;
  } else if (next_bucket_ < buckets_.size()) {
    std::string unused;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) unused += (unused.empty() ? "" : ", ") + names_[i];
    // Drain what was launched so the group stays usable, then say which parameters were missed.
    for (size_t k = 0; k < next_bucket_; ++k) pg_->wait(buckets_[k].work, "gradient allreduce");
    throw Error("these parameters received no gradient in this backward pass: " + unused,
                "make every parameter take part in the loss, or construct DistributedDataParallel with "
                "find_unused_parameters = true (--find-unused-parameters) to treat them as zero");
  }
  point_grads_at_buckets(keep_undefined);
}

// Waits for every bucket and makes each .grad its averaged slice of the bucket (no copy back). The
// next backward accumulates into it in place, or, after zero_grad() set it to none, into a new
// tensor that is copied in.
void GradientReducer::point_grads_at_buckets(const std::vector<char>& keep_undefined) {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    pg_->wait(b.work, "gradient allreduce (bucket " + std::to_string(k + 1) + " of " +
                          std::to_string(buckets_.size()) + ")");
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t i = b.params[slot];
      if (keep_undefined[i]) continue;
      torch::Tensor& p = params_[i];
      const int64_t start = b.flat.storage_offset() + b.offsets[slot];
      const auto* where = static_cast<const char*>(b.flat.storage().data()) + start * b.flat.element_size();
      if (p.grad().defined() && p.grad().data_ptr() == where) continue;
      p.mutable_grad() = storage_slice(b.flat, start, p.sizes());
    }
  }
}

}  // namespace ddp
