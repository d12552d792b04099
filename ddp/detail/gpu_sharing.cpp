#include "ddp/detail/gpu_sharing.h"

#include <map>
#include <tuple>
#include <utility>

#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace ddp {

std::vector<SharedGpu> shared_gpus(const std::vector<GpuClaim>& claims) {
  std::vector<SharedGpu> gpus;  // every GPU claimed, in order of its first rank
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  for (size_t rank = 0; rank < claims.size(); ++rank) {
    const GpuClaim& c = claims[rank];
    if (c.bus_id.empty()) continue;  // a CPU rank shares nothing
    auto [it, added] = index.emplace(std::make_tuple(c.host, c.machine, c.bus_id), gpus.size());
    if (added) gpus.push_back({c.host, c.bus_id, {}});
    gpus[it->second].ranks.push_back(static_cast<int>(rank));
  }
  std::vector<SharedGpu> shared;
  for (auto& g : gpus)
    if (g.ranks.size() > 1) shared.push_back(std::move(g));
  return shared;
}

SharingVerdict judge_gpu_sharing(const std::string& backend, const std::vector<GpuClaim>& claims) {
  SharingVerdict verdict;
  const auto shared = shared_gpus(claims);
  if (shared.empty()) return verdict;
  std::string list;
  for (const auto& g : shared)
    list += (list.empty() ? "" : "; ") + std::string("ranks ") + ranks_text(g.ranks) + " on GPU " + g.bus_id + " of " +
            g.host;
  if (backend != "nccl") {
    verdict.note = list + " (fine for " + backend + ", which copies CUDA tensors through the host; NCCL would refuse)";
    return verdict;
  }
  verdict.refused = true;
  verdict.what =
      "ranks would share a GPU under NCCL, which needs one GPU per rank (it would stop with "
      "\"Duplicate GPU detected\"): " +
      list;
  verdict.hint =
      "one rank per GPU: tasks per node (--ntasks-per-node, --nproc_per_node) = GPUs per node "
      "(--gres=gpu:N / --gpus-per-node=N), each rank on its local rank's GPU (" +
      setting_value(Setting::kDevice, "cuda") + ", not cuda:N); or " + setting_value(Setting::kBackend, "gloo") +
      " to share GPUs";
  return verdict;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);  // not "-" + ...: GCC 12's -Wrestrict false positive
    i = j + 1;
  }
  return out;
}

}  // namespace ddp
