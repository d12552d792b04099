#include "ddp/data.h"

#include <algorithm>
#include <chrono>

#include "ddp/error.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace ddp {

Batch Dataset::gather(const torch::Tensor& indices) const {
  torch::Tensor x = inputs.index_select(0, indices).to(torch::kFloat32);
  if (input_scale != 1.0) x.mul_(input_scale);
  if (input_shift != 0.0) x.sub_(input_shift);
  if (input_divide != 1.0) x.div_(input_divide);
  return {x, targets.index_select(0, indices)};
}

namespace {
// `where` is `device` ("cuda" without an index means the current GPU).
bool is_placed_on(const torch::Device& where, const torch::Device& device) {
  return device.has_index() ? where == device : where.type() == device.type();
}
}  // namespace

const Dataset& Dataset::on(const torch::Device& device) const {
  if (is_placed_on(inputs.device(), device)) return *this;
  const bool have_copy = on_device_ && on_device_from_ == inputs.unsafeGetTensorImpl() &&
                         is_placed_on(on_device_->inputs.device(), device);
  if (!have_copy) {
    auto copy = std::make_shared<Dataset>();
    // Once per dataset and run: a plain (blocking) copy, as compact as the data are stored.
    copy->inputs = inputs.to(device);
    copy->targets = targets.to(device);
    copy->input_scale = input_scale;
    copy->input_shift = input_shift;
    copy->input_divide = input_divide;
    on_device_ = std::move(copy);
    on_device_from_ = inputs.unsafeGetTensorImpl();
  }
  return *on_device_;
}

Dataset make_synthetic_dataset(int64_t samples, int64_t features, uint64_t seed) {
  // A generator of its own: the data do not depend on what else used the global RNG.
  auto gen = at::detail::createCPUGenerator(seed);
  Dataset d;
  d.inputs = torch::rand({samples, features}, gen);
  const auto w = torch::linspace(-1.0, 1.0, features).reshape({features, 1});  // the map to learn
  const double b = 0.5;
  d.targets = torch::matmul(d.inputs, w) + b + 0.01 * torch::randn({samples, 1}, gen);
  return d;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, uint64_t seed, bool shuffle)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), seed_(seed), shuffle_(shuffle) {
  DDP_CHECK(dataset_size > 0, "the dataset is empty", "check the data files");
  DDP_CHECK(num_replicas >= 1 && rank >= 0 && rank < num_replicas,
            "sampler rank " + std::to_string(rank) + " outside 0.." + std::to_string(num_replicas - 1),
            "pass the global rank and the world size");
  num_samples_ = (dataset_size + num_replicas - 1) / num_replicas;
  set_epoch(0);
}

void DistributedSampler::set_epoch(int64_t epoch) {
  if (epoch == epoch_) return;
  epoch_ = epoch;
  torch::Tensor order;
  if (shuffle_) {
    // The same permutation on every rank: it depends only on the seed and the epoch.
    auto gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch));
    order = torch::randperm(dataset_size_, gen, torch::kInt64);
  } else {
    order = torch::arange(dataset_size_, torch::kInt64);
  }
  const int64_t total = num_samples_ * num_replicas_;
  if (total > dataset_size_) order = torch::cat({order, order.narrow(0, 0, total - dataset_size_)});  // pad
  indices_ = order.slice(0, rank_, total, num_replicas_).contiguous();
}

Loader::Loader(const Dataset& data, const DistributedSampler& sampler, int64_t batch_size, torch::Device device)
    : data_(data.on(device)), sampler_(sampler), batch_size_(batch_size), device_(device) {
  DDP_CHECK(batch_size > 0, "batch size must be positive",
            "use " + setting_value(Setting::kBatchSize, "N") + " with N >= 1");
}

const torch::Tensor& Loader::order() const {
  if (device_.is_cpu()) return sampler_.indices();
  if (order_epoch_ != sampler_.epoch() || !order_on_device_.defined()) {
    // Once per epoch: through pinned memory, without blocking the host (the caching host
    // allocator keeps the pinned block until the copy has run).
    order_on_device_ = sampler_.indices().pin_memory().to(device_, /*non_blocking=*/true);
    order_epoch_ = sampler_.epoch();
  }
  return order_on_device_;
}

int64_t Loader::steps() const {
  const int64_t all = (sampler_.num_samples() + batch_size_ - 1) / batch_size_;
  return step_limit_ > 0 ? std::min(all, step_limit_) : all;
}

void Loader::limit_steps(int64_t steps) {
  DDP_CHECK(steps >= 0, "Loader::limit_steps: " + std::to_string(steps) + " steps per epoch",
            "pass a positive number of steps per epoch, or 0 for all of them");
  step_limit_ = steps;
}

Batch Loader::batch(int64_t step) const {
  const auto begin = std::chrono::steady_clock::now();
  const int64_t start = step * batch_size_;
  const int64_t n = std::min(batch_size_, sampler_.num_samples() - start);
  // On a GPU: gather, convert and normalise are kernels on the device (no copy, no wait).
  Batch b = data_.gather(order().narrow(0, start, n));
  load_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return b;
}

double Loader::take_load_seconds() {
  const double seconds = load_seconds_;
  load_seconds_ = 0;
  return seconds;
}

}  // namespace ddp
