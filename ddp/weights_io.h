// defines: export_weights / import_weights — a model's state_dict (parameters and buffers, named as
//          in Python: "conv1.weight") in the files of Python's torch.save / torch.load, so that a model
//          trained here is evaluated in Python (python/) and one trained in Python starts a run here.
//          state_dict / load_state_dict — the same in memory (PyTorch's model.state_dict() and
//          model.load_state_dict(d)), e.g. FSDP's gathered full_state_dict() into a fresh model.
//          WeightsMismatchError — the file's (or the dict's) tensors do not fit the model.
#pragma once

#include <torch/torch.h>

#include <string>

#include "ddp/error.h"         // defines: ddp::Error
#include "ddp/torch_pickle.h"  // defines: TensorDict

namespace ddp {

// Parameters, then buffers, under the names Python's model.state_dict() uses.
TensorDict state_dict(torch::nn::Module& model);

// Writes the model's state_dict to `path` atomically (temp file, fsync, rename; readable by the user
// only). In Python, torch.load(path) returns a dict that the twin module's load_state_dict() takes.
void export_weights(const std::string& path, torch::nn::Module& model);

// What import_weights throws when the file's tensors do not fit the model (nothing was loaded): its
// own type, so that a program that knows which Python module is the twin can say so in its hint.
class WeightsMismatchError : public Error {
 public:
  using Error::Error;
};

// Loads into `model` a state_dict that Python saved with torch.save(model.state_dict(), path). Every
// key, shape and dtype must be the model's: otherwise WeightsMismatchError names each missing,
// unexpected or different tensor, and the model is left as it was. An unreadable file: ddp::Error.
void import_weights(const std::string& path, torch::nn::Module& model);

// Copies `state` into `model` (PyTorch's model.load_state_dict(state), strict): every key, shape and
// dtype must be the model's, else WeightsMismatchError names each missing, unexpected or different
// tensor and the model is left as it was. `what` names the dict in that message.
void load_state_dict(torch::nn::Module& model, const TensorDict& state, const std::string& what = "the state_dict");

}  // namespace ddp
