// defines: TensorDict (a state_dict: names and tensors in order) and its file format shared with
//          Python: tensor_dict_to_bytes writes what Python's torch.load reads (also with
//          weights_only=True), tensor_dict_from_bytes reads what Python's torch.save wrote (a dict or
//          the OrderedDict of model.state_dict()). Public API (weights_io.h builds on it; a full state
//          dict of FullyShardedDataParallel is a TensorDict).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace ddp {

// Names and tensors in order: a state_dict.
using TensorDict = std::vector<std::pair<std::string, torch::Tensor>>;

// torch.save's zip archive holding a pickled dict of name -> tensor. The tensors are written from
// contiguous CPU copies; nothing but tensors, strings and the dict itself is pickled, so Python's
// default torch.load (weights_only=True) accepts it.
std::string tensor_dict_to_bytes(const TensorDict& tensors);

// Reads torch.save's zip archive of a dict name -> tensor. Only what a state_dict holds is
// accepted (dict, OrderedDict, tensors and their storages, plain values), as Python's
// weights_only=True does: any other Python class, a nested dict or list, a truncated or foreign
// file throws ddp::Error naming `what` (e.g. the file's path). The tensors are CPU, contiguous.
TensorDict tensor_dict_from_bytes(const std::string& bytes, const std::string& what);

}  // namespace ddp
