#include "ddp/detail/model_broadcast.h"

#include "ddp/detail/text.h"  // defines: dtype_name, fnv1a, shortened_list
#include "ddp/error.h"

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

}  // namespace

void broadcast_from_rank0(torch::nn::Module& module, const std::vector<std::string>& names,
                          const std::vector<torch::Tensor>& params, ProcessGroup& pg, bool with_buffers) {
  std::vector<torch::Tensor> buffers;
  if (with_buffers) buffers = module.buffers(/*recurse=*/true);
  broadcast_from_rank0(names, params, buffers, pg);
}

void broadcast_from_rank0(const std::vector<std::string>& names, const std::vector<torch::Tensor>& params,
                          const std::vector<torch::Tensor>& buffers, ProcessGroup& pg) {
  torch::NoGradGuard no_grad;  // in-place writes into leaves that require grad
  auto mine = torch::tensor({static_cast<int64_t>(params.size()), fingerprint(names, params)}, torch::kInt64)
                  .to(params[0].device());
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
  broadcast_tensors(state, 0, pg, "initial broadcast of parameters from rank 0");
}

void broadcast_tensors(const std::vector<torch::Tensor>& tensors, int root, ProcessGroup& pg, const std::string& what) {
  torch::NoGradGuard no_grad;  // in-place writes into leaves that require grad
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::vector<torch::Tensor>> inputs;
  inputs.reserve(tensors.size());  // the backend keeps a reference to each vector until its work ends
  for (const auto& t : tensors) {
    inputs.push_back({t});
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    works.push_back(pg.backend().broadcast(inputs.back(), bo));
  }
  for (auto& w : works) pg.wait(w, what);
}

}  // namespace ddp
