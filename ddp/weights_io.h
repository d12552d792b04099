// defines: export_weights / import_weights — a model's state_dict (parameters and buffers, named as
//          in Python: "conv1.weight") in the files of Python's torch.save / torch.load, so that a model
//          trained here is evaluated in Python (python/) and one trained in Python starts a run here.
#pragma once

#include <torch/torch.h>

#include <string>

#include "ddp/torch_pickle.h"

namespace ddp {

// Parameters, then buffers, under the names Python's model.state_dict() uses.
TensorDict state_dict(torch::nn::Module& model);

// Writes the model's state_dict to `path` atomically (temp file, fsync, rename; readable by the user
// only). In Python, torch.load(path) returns a dict that the twin module's load_state_dict() takes.
void export_weights(const std::string& path, torch::nn::Module& model);

// Loads into `model` a state_dict that Python saved with torch.save(model.state_dict(), path). Every
// key, shape and dtype must be the model's: otherwise ddp::Error names each missing, unexpected or
// different tensor, and the model is left as it was.
void import_weights(const std::string& path, torch::nn::Module& model);

}  // namespace ddp
