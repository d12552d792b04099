#include "ddp/snapshot.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>  // defines: a sharded snapshot's manifest, read here only to name its writer
#include <sstream>

#include "ddp/config.h"  // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/detail/checked_file.h"
#include "ddp/error.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

#ifdef DDPW_HAVE_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace ddp {
namespace {

// File layout (checked_file.h): magic, version, payload size, CRC-32 of the payload, payload (a
// LibTorch archive). LibTorch's own loader checks neither bytes nor shapes: a flipped byte or another
// model would load. Version 2 added who wrote the file: meta/program holds the writer's label,
// meta/dataset the dataset. meta/kind is written empty: files written before the label held a
// variant there, which reads back as "program (kind)" (detail::legacy_writer), so they still load.
constexpr std::string_view kMagic = "DDPWSNAP";
constexpr uint32_t kVersion = 2;

Error snapshot_error(const std::string& path, const std::string& why) {
  return Error("snapshot '" + path + "' " + why + "; it was left untouched",
               "restore a good copy, or start again with " + setting_name(Setting::kFreshStart) + " (or another " +
                   setting_name(Setting::kSnapshotPath) + " path)");
}

void write_tensors(torch::serialize::OutputArchive& archive, torch::nn::Module& model) {
  int64_t count = 0;
  for (const auto& p : model.named_parameters(true)) archive.write("model/" + p.key(), p.value()), ++count;
  for (const auto& b : model.named_buffers(true))
    archive.write("model/" + b.key(), b.value(), /*is_buffer=*/true), ++count;
  archive.write("meta/model_tensors", torch::tensor(count));
}

int64_t read_int(torch::serialize::InputArchive& archive, const std::string& key, const std::string& path) {
  torch::Tensor t;
  if (!archive.try_read(key, t)) throw snapshot_error(path, "has no '" + key + "' (not a training snapshot)");
  return t.item<int64_t>();
}

std::string read_string(torch::serialize::InputArchive& archive, const std::string& key, const std::string& path) {
  c10::IValue v;
  if (!archive.try_read(key, v) || !v.isString())
    throw snapshot_error(path, "has no '" + key + "' (not a training snapshot)");
  return v.toStringRef();
}

SnapshotOwner read_owner(torch::serialize::InputArchive& archive, const std::string& path) {
  SnapshotOwner owner;
  owner.writer =
      detail::legacy_writer(read_string(archive, "meta/program", path), read_string(archive, "meta/kind", path));
  owner.dataset = read_string(archive, "meta/dataset", path);
  return owner;
}

// Another program's snapshot would load (same model, same shapes) and resume the wrong run: an
// unfinished run would "finish" another one's training and print its checksum.
void check_owner(torch::serialize::InputArchive& archive, const std::string& path, const SnapshotOwner& mine) {
  const SnapshotOwner theirs = read_owner(archive, path);
  if (theirs == mine) return;
  throw Error("snapshot '" + path + "' was written by " + theirs.label() + ", not by this run, " + mine.label() +
                  "; it was left untouched",
              "give this run its own file with " + setting_value(Setting::kSnapshotPath, "PATH") +
                  ", or start it over with " + setting_name(Setting::kFreshStart) +
                  " (its first save then replaces the file)");
}

// Reads every parameter and buffer, refusing a tensor of another shape before anything is changed.
void read_model(torch::serialize::InputArchive& archive, torch::nn::Module& model, const std::string& path) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> loaded;  // (destination, value)
  auto take_one = [&](const std::string& name, const torch::Tensor& dest, bool is_buffer) {
    torch::Tensor value;
    if (!archive.try_read("model/" + name, value, is_buffer))
      throw snapshot_error(path, "has no tensor '" + name + "': it was written by another model");
    if (value.sizes() != dest.sizes())
      throw snapshot_error(path, "holds '" + name + "' of shape " + c10::str(value.sizes()) + " but the model's is " +
                                     c10::str(dest.sizes()) + ": it was written by another model");
    loaded.emplace_back(dest, value);
  };
  int64_t count = 0;
  for (const auto& p : model.named_parameters(true)) take_one(p.key(), p.value(), false), ++count;
  for (const auto& b : model.named_buffers(true)) take_one(b.key(), b.value(), true), ++count;
  if (read_int(archive, "meta/model_tensors", path) != count)
    throw snapshot_error(path, "holds a different number of tensors than the model: it was written by another model");
  torch::NoGradGuard no_grad;
  for (auto& [dest, value] : loaded) dest.copy_(value);
}

// "... training ...": who wrote the sharded snapshot whose manifest (JSON) is at `path`; "" when it
// is no manifest or records no owner. (Read here, not through sharded_snapshot.h, which includes
// this header: a ZeRO manifest where a plain snapshot is expected is named by its writer.)
std::string manifest_writer(const std::string& path) {
  try {
    std::ifstream file(path);
    const auto manifest = nlohmann::json::parse(file);
    if (!manifest.is_object() || manifest.value("format", std::string()) != "ddp-workshop sharded snapshot") return "";
    const auto entry = manifest.find("program");
    return entry == manifest.end() ? "" : detail::owner_from_manifest_entry(entry->dump()).label();
  } catch (const std::exception&) {
    return "";
  }
}

// Opens, checks and unpacks the file into an archive; nullopt if it does not exist.
std::optional<torch::serialize::InputArchive> open_archive(const std::string& path, const torch::Device& device) {
  std::optional<CheckedPayload> payload;
  try {
    payload = read_checked_file(path, kMagic, kVersion, "snapshot");
  } catch (const CheckedFileError& e) {
    // A ZeRO program's manifest (JSON) at this path: say whose, not only "wrong magic bytes".
    // Only for a file that opens like JSON: the manifest reader asks this file's writer in turn.
    std::ifstream file(path, std::ios::binary);
    char first = 0;
    file >> first;  // skips leading white space
    const std::string sharded = first == '{' ? manifest_writer(path) : "";
    if (!sharded.empty())
      throw snapshot_error(path, "is a sharded snapshot (ZeRO: a manifest and a shard per rank) written by " + sharded +
                                     ", not a plain one");
    throw snapshot_error(path, e.what());
  }
  if (!payload) return std::nullopt;
  torch::serialize::InputArchive archive;
  try {
    std::istringstream stream(payload->bytes);
    archive.load_from(stream, device);
  } catch (const c10::Error& e) {
    throw snapshot_error(path, std::string("cannot be unpacked: ") + e.what_without_backtrace());
  }
  return archive;
}

torch::Device device_of(torch::nn::Module& model) {
  auto params = model.parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

}  // namespace

std::string detail::legacy_writer(const std::string& name, const std::string& variant) {
  return variant.empty() || variant == "program" ? name : name + " (" + variant + ")";
}

std::string detail::owner_to_manifest_entry(const SnapshotOwner& owner) {
  return nlohmann::ordered_json{{"writer", owner.writer}, {"dataset", owner.dataset}}.dump();
}

SnapshotOwner detail::owner_from_manifest_entry(const std::string& json) {
  const auto id = nlohmann::json::parse(json);
  SnapshotOwner o;
  o.writer = id.contains("writer") ? id.value("writer", std::string())
                                   : legacy_writer(id.value("name", std::string()), id.value("kind", std::string()));
  o.dataset = id.value("dataset", std::string("?"));
  return o;
}

std::string SnapshotOwner::label() const { return (writer.empty() ? "this program" : writer) + " training " + dataset; }

void save_snapshot(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                   const TrainingState& state, const std::optional<SnapshotOwner>& owner, uint64_t seed) {
  torch::serialize::OutputArchive archive;
  write_tensors(archive, model);
  archive.write("meta/epochs_run", torch::tensor(state.epochs_run));
  archive.write("meta/step_in_epoch", torch::tensor(state.step_in_epoch));
  archive.write("meta/seed", torch::tensor(static_cast<int64_t>(seed)));
  archive.write("meta/world_size", torch::tensor(state.world_size));
  const SnapshotOwner who = owner.value_or(SnapshotOwner{});
  archive.write("meta/program", c10::IValue(who.writer));
  archive.write("meta/kind", c10::IValue(std::string()));
  archive.write("meta/dataset", c10::IValue(who.dataset));
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  // RNG state (dropout): a resumed run draws the same numbers as an uninterrupted one.
  archive.write("rng/cpu", at::detail::getDefaultCPUGenerator().get_state());
#ifdef DDPW_HAVE_CUDA
  if (device_of(model).is_cuda())
    archive.write("rng/cuda", at::cuda::detail::getDefaultCUDAGenerator(device_of(model).index()).get_state());
#endif
  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  write_checked_file(path, kMagic, kVersion, payload_stream.str(), setting_name(Setting::kSnapshotPath));
}

std::string snapshot_writer(const std::string& path) {
  try {
    auto archive = open_archive(path, torch::kCPU);
    if (!archive) return "";
    const SnapshotOwner owner = read_owner(*archive, path);
    return owner.writer.empty() ? "" : owner.label();
  } catch (const Error&) {
    return "";
  }
}

std::optional<TrainingState> load_snapshot(const std::string& path, torch::nn::Module& model,
                                           torch::optim::Optimizer& optimizer, int64_t world_size,
                                           const std::optional<SnapshotOwner>& owner) {
  auto archive = open_archive(path, device_of(model));
  if (!archive) return std::nullopt;
  if (owner) check_owner(*archive, path, *owner);
  read_model(*archive, model, path);
  TrainingState state;
  state.epochs_run = read_int(*archive, "meta/epochs_run", path);
  state.step_in_epoch = read_int(*archive, "meta/step_in_epoch", path);
  state.world_size = read_int(*archive, "meta/world_size", path);
  if (state.world_size != world_size && state.step_in_epoch > 0) {
    std::fprintf(stderr,
                 "warning: snapshot '%s' was taken by %lld rank(s) at step %lld of epoch %lld; with %lld rank(s) "
                 "the shards differ, so epoch %lld restarts from its first step\n",
                 path.c_str(), static_cast<long long>(state.world_size), static_cast<long long>(state.step_in_epoch),
                 static_cast<long long>(state.epochs_run), static_cast<long long>(world_size),
                 static_cast<long long>(state.epochs_run));
    state.step_in_epoch = 0;
  }
  torch::serialize::InputArchive optimizer_archive;
  if (!archive->try_read("optimizer", optimizer_archive)) throw snapshot_error(path, "has no optimizer state");
  try {
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw snapshot_error(
        path, std::string("holds optimizer state that does not fit this optimizer: ") + e.what_without_backtrace());
  }
  torch::Tensor rng;
  if (archive->try_read("rng/cpu", rng)) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();  // a handle: setting it sets the global one
    cpu.set_state(rng.cpu());
  }
#ifdef DDPW_HAVE_CUDA
  if (device_of(model).is_cuda() && archive->try_read("rng/cuda", rng)) {
    at::Generator cuda = at::cuda::detail::getDefaultCUDAGenerator(device_of(model).index());
    cuda.set_state(rng.cpu());
  }
#endif
  return state;
}

void load_model_weights(const std::string& path, torch::nn::Module& model) {
  auto archive = open_archive(path, device_of(model));
  if (!archive) throw Error("snapshot '" + path + "' does not exist", "train first, or check the path");
  read_model(*archive, model, path);
}

}  // namespace ddp
