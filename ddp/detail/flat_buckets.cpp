#include "ddp/detail/flat_buckets.h"

#include <algorithm>

namespace ddp {

std::vector<BucketPlan> plan_buckets(const std::vector<torch::Tensor>& params, double bucket_mb) {
  const auto cap = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  const int64_t first_cap = std::min<int64_t>(cap, 1024 * 1024);
  std::vector<BucketPlan> buckets;
  BucketPlan current;
  int64_t bytes = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    buckets.push_back(std::move(current));
    current = BucketPlan{};
    bytes = 0;
  };
  for (size_t k = params.size(); k-- > 0;) {
    const auto& p = params[k];
    if (!current.params.empty()) {
      const auto& first = params[current.params[0]];
      if (p.scalar_type() != first.scalar_type() || p.device() != first.device()) close();
    }
    current.params.push_back(k);
    current.offsets.push_back(current.numel);
    current.numel += p.numel();
    bytes += p.numel() * p.element_size();
    if (bytes >= (buckets.empty() ? first_cap : cap)) close();
  }
  close();
  return buckets;
}

BucketPlan plan_flat(const std::vector<torch::Tensor>& params) {
  BucketPlan plan;
  for (size_t k = 0; k < params.size(); ++k) {
    plan.params.push_back(k);
    plan.offsets.push_back(plan.numel);
    plan.numel += params[k].numel();
  }
  return plan;
}

int64_t padded_numel(int64_t numel, int64_t multiple) { return (numel + multiple - 1) / multiple * multiple; }

torch::Tensor storage_slice(const torch::Tensor& flat, int64_t start, torch::IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  auto t = torch::empty({0}, flat.options());
  t.set_(flat.storage(), start, sizes, strides);
  return t;
}

}  // namespace ddp
