#include "ddp/weights_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "ddp/detail/text.h"  // defines: dtype_name, shortened_list
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace ddp {
namespace {

// Python's names for the dtypes a model may hold: the user fixes the file in Python.
using detail::dtype_name;

std::string shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

// "a, b, c and 4 more": a model of another kind differs in every tensor.
std::string listing(const std::vector<std::string>& items) { return detail::shortened_list(items, 6); }

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string why = std::strerror(errno);
    if (!path_exists(path))
      throw Error("weights file '" + path + "' does not exist",
                  "save it in Python with torch.save(model.state_dict(), '" + path + "'), or check the path");
    throw Error("weights file '" + path + "' cannot be read (" + why + ")", "check its permissions");
  }
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TensorDict state_dict(torch::nn::Module& model) {
  TensorDict out;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

void export_weights(const std::string& path, torch::nn::Module& model) {
  write_file_atomically(path, tensor_dict_to_bytes(state_dict(model)), setting_name(Setting::kExportWeightsPath));
}

namespace {

// load_state_dict's work. `source` says where the tensors are ("the file"); `hint` is the fix when
// they do not fit the model.
void load_checked(torch::nn::Module& model, const TensorDict& state, const std::string& what, const std::string& source,
                  const std::string& hint) {
  std::map<std::string, torch::Tensor> given;
  std::vector<std::string> twice;
  for (const auto& [name, tensor] : state)
    if (!given.emplace(name, tensor).second) twice.push_back(name);

  std::vector<std::string> missing, unexpected, different;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (the model's tensor, the given one)
  std::set<std::string> in_model;
  for (const auto& [name, dest] : state_dict(model)) {
    in_model.insert(name);
    const auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name + " " + shape(dest));
    } else if (it->second.sizes() != dest.sizes()) {
      different.push_back(name + " has shape " + shape(it->second) + " in " + source + ", " + shape(dest) +
                          " in the model");
    } else if (it->second.scalar_type() != dest.scalar_type()) {
      different.push_back(name + " is " + dtype_name(it->second.scalar_type()) + " in " + source + ", " +
                          dtype_name(dest.scalar_type()) + " in the model");
    } else {
      copies.emplace_back(dest, it->second);
    }
  }
  for (const auto& [name, tensor] : given)
    if (!in_model.count(name)) unexpected.push_back(name + " " + shape(tensor));

  std::string problems;
  auto add = [&](const std::string& label, const std::vector<std::string>& items) {
    if (!items.empty()) problems += (problems.empty() ? "" : "; ") + label + listing(items);
  };
  add("missing ", missing);
  add("unexpected ", unexpected);
  add("", different);
  add("named twice: ", twice);
  if (!problems.empty())
    throw WeightsMismatchError(
        what + " does not fit the model (" + model.name() + "): " + problems + "; nothing was loaded", hint);
  torch::NoGradGuard no_grad;
  for (auto& [dest, value] : copies) dest.copy_(value);
}

}  // namespace

void import_weights(const std::string& path, torch::nn::Module& model) {
  const std::string bytes = read_whole_file(path);
  const std::string what = "weights file '" + path + "'";
  // The training snapshots (snapshot.h) are LibTorch archives behind a header, not torch.save's.
  if (bytes.rfind("DDPWSNAP", 0) == 0)
    throw Error(what + " is a training snapshot (save_snapshot), not a state_dict that torch.save wrote",
                "resume from it with load_snapshot, or convert it: load_model_weights(\"" + path +
                    "\", model), then export_weights(\"weights.pt\", model)");
  load_checked(model, tensor_dict_from_bytes(bytes, what), what, "the file",
               "save the state_dict of this model's twin in Python (the same names, shapes and buffers), in "
               "float32");
}

void load_state_dict(torch::nn::Module& model, const TensorDict& state, const std::string& what) {
  load_checked(model, state, what, "the dict",
               "load it into a model built as the one it came from (the same architecture and sizes: "
               "compare the names and shapes with ddp::state_dict(model))");
}

}  // namespace ddp
