// defines: broadcast_from_rank0 — how wrapping a model for data parallelism starts: check that every
//          rank built the same model (parameter names and shapes, against rank 0's: a different layer
//          size would otherwise hang or corrupt), then give every rank rank 0's parameters (and
//          buffers), since ranks may start from different random weights. broadcast_tensors —
//          one rank's tensors to every rank, in place (Join's final model uses it too).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddp/process_group.h"

namespace ddp {

// `names` and `params` are the module's trainable parameters, in registration order.
void broadcast_from_rank0(torch::nn::Module& module, const std::vector<std::string>& names,
                          const std::vector<torch::Tensor>& params, ProcessGroup& pg, bool with_buffers);

// The same for tensors that belong to no module (TensorDataParallel): `buffers` are broadcast too,
// but not checked (they have no gradient).
void broadcast_from_rank0(const std::vector<std::string>& names, const std::vector<torch::Tensor>& params,
                          const std::vector<torch::Tensor>& buffers, ProcessGroup& pg);

// Rank `root`'s values of `tensors` to every rank, in place: one broadcast per tensor, all started,
// then waited in order with the group's timeout (`what` names them in an error). Every rank calls it
// with the same tensors' shapes, in the same order.
void broadcast_tensors(const std::vector<torch::Tensor>& tensors, int root, ProcessGroup& pg, const std::string& what);

}  // namespace ddp
