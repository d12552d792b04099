#include "ddp/sharded_snapshot.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>  // defines: the manifest (ordered_json keeps its keys in writing order)
#include <optional>
#include <set>
#include <sstream>

#include "ddp/config.h"            // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/detail/agreement.h"  // defines: attempt, agree (every rank stops together)
#include "ddp/detail/checked_file.h"
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

#ifdef DDPW_HAVE_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace ddp {
namespace {

using Json = nlohmann::ordered_json;
using detail::agree;
using detail::attempt;

constexpr std::string_view kShardMagic = "DDPWSHRD";
constexpr uint32_t kShardVersion = 1;
constexpr const char* kFormat = "ddp-workshop sharded snapshot";
// Version 2 added who wrote the snapshot ("program": writer, dataset; before the writer's label:
// name, kind, step, dataset, still read), as the plain snapshot's format version 2 did; version 1
// manifests (no writer) are refused by number.
constexpr int64_t kManifestVersion = 2;

Error sharded_error(const std::string& path, const std::string& why) {
  return Error("sharded snapshot '" + path + "' " + why + "; it was left untouched",
               "restore the missing or damaged file, or start again with " + setting_name(Setting::kFreshStart) +
                   " (or another " + setting_name(Setting::kSnapshotPath) + " path)");
}

std::string shard_name(const std::string& path, int64_t generation, int rank, int world) {
  return base_name(path) + ".g" + std::to_string(generation) + ".rank" + std::to_string(rank) + "-of-" +
         std::to_string(world);
}

std::string beside(const std::string& path, const std::string& name) { return parent_dir(path) + "/" + name; }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The layout of the flat groups (ZeRO's buckets, FSDP's units): which parameter sits where in
// which group. Equal layouts (same world size, same groups) let a rank read back only its own shard.
Json layout_of(const ShardedState& state) {
  Json groups = Json::array();
  for (const auto& g : state.sharded_groups()) {
    Json members = Json::array();
    for (size_t s = 0; s < g.params.size(); ++s) members.push_back(Json::array({g.params[s], g.offsets[s]}));
    groups.push_back({{"numel", g.numel}, {"padded_numel", g.padded_numel}, {"members", members}});
  }
  return groups;
}

Json parameters_of(const std::vector<ShardedParameter>& params) {
  Json list = Json::array();
  for (const auto& p : params)
    list.push_back({{"name", p.name}, {"shape", p.shape}, {"dtype", std::string(c10::toString(p.dtype))}});
  return list;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

struct ShardEntry {
  int rank = 0;
  std::string file;  // beside the manifest
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

struct Manifest {
  Json json;
  int64_t generation = 0;
  int world_size = 0;
  std::vector<ShardEntry> shards;  // by rank
  TrainingState training;
  int64_t steps_taken = 0;                     // optimizer steps: Adam's bias correction needs it
  std::optional<int64_t> steps_applied;        // mixed precision: steps not skipped (bias correction)
  std::optional<GradScalerState> grad_scaler;  // mixed precision: the scaler's state
  std::vector<std::string> buffers;
};

// nullopt when there is no manifest; a sharded_error when it cannot be used.
std::optional<Manifest> read_manifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!path_exists(path)) return std::nullopt;
    throw sharded_error(path, "cannot be read (" + std::string(std::strerror(errno)) + ")");
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  if (s.rfind("DDPWSNAP", 0) == 0)
    throw Error(
        "sharded snapshot '" + path + "' is a plain snapshot, written without ZeRO by " +
            [&] {
              const std::string w = snapshot_writer(path);
              return w.empty() ? std::string("a DDP program") : w;
            }() +
            ", not a sharded one; it was left untouched",
        "give this run its own file with " + setting_value(Setting::kSnapshotPath, "PATH") +
            ", or start it over with " + setting_name(Setting::kFreshStart) +
            " (its first save then replaces the file)");
  Manifest m;
  try {
    m.json = Json::parse(s);
    if (!m.json.is_object() || m.json.value("format", std::string()) != kFormat)
      throw sharded_error(path, "is not the manifest of a ddp-workshop sharded snapshot");
    if (m.json.at("version").get<int64_t>() != kManifestVersion)
      throw sharded_error(path, "has manifest version " + m.json.at("version").dump() + ", expected " +
                                    std::to_string(kManifestVersion));
    m.generation = m.json.at("generation").get<int64_t>();
    m.world_size = m.json.at("world_size").get<int>();
    for (const auto& e : m.json.at("shards")) {
      ShardEntry shard;
      shard.rank = e.at("rank").get<int>();
      shard.file = e.at("file").get<std::string>();
      shard.bytes = e.at("bytes").get<uint64_t>();
      shard.crc = static_cast<uint32_t>(std::stoul(e.at("crc32").get<std::string>(), nullptr, 16));
      m.shards.push_back(shard);
    }
    const auto& t = m.json.at("training");
    m.training.epochs_run = t.at("epochs_run").get<int64_t>();
    m.training.step_in_epoch = t.at("step_in_epoch").get<int64_t>();
    m.training.world_size = t.at("world_size").get<int64_t>();
    m.steps_taken = m.json.at("optimizer").at("steps_taken").get<int64_t>();
    if (m.json.at("optimizer").contains("steps_applied"))
      m.steps_applied = m.json.at("optimizer").at("steps_applied").get<int64_t>();
    if (m.json.contains("grad_scaler"))
      m.grad_scaler = GradScalerState{m.json.at("grad_scaler").at("scale").get<double>(),
                                      m.json.at("grad_scaler").at("growth_tracker").get<int64_t>()};
    m.buffers = m.json.at("buffers").get<std::vector<std::string>>();
    for (const auto& p : m.json.at("parameters")) {  // read now: a malformed entry fails here, not later
      (void)p.at("name").get<std::string>();
      (void)p.at("shape").get<std::vector<int64_t>>();
    }
    for (const auto& b : m.json.at("buckets")) {
      (void)b.at("padded_numel").get<int64_t>();
      for (const auto& member : b.at("members")) (void)member.at(0).get<size_t>(), (void)member.at(1).get<int64_t>();
    }
  } catch (const Json::exception& e) {
    throw sharded_error(path, std::string("is not a readable manifest (") + e.what() + ")");
  } catch (const std::logic_error& e) {  // stoul
    throw sharded_error(path, std::string("is not a readable manifest (") + e.what() + ")");
  }
  if (m.world_size < 1 || m.shards.size() != static_cast<size_t>(m.world_size))
    throw sharded_error(
        path, "lists " + std::to_string(m.shards.size()) + " shards for " + std::to_string(m.world_size) + " ranks");
  for (int r = 0; r < m.world_size; ++r)
    if (m.shards[r].rank != r) throw sharded_error(path, "lists its shards out of rank order");
  return m;
}

// One shard, read back and checked against the manifest.
struct ShardContents {
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;  // one slice per bucket of the saved layout
  torch::Tensor rng_cpu, rng_cuda;
  std::map<std::string, torch::Tensor> buffers;  // rank 0's shard only
};

// Read into host memory (a rank's device never holds more than its own slices).
ShardContents read_shard(const std::string& path, const Manifest& m, int rank) {
  const ShardEntry& entry = m.shards.at(rank);
  const std::string file = beside(path, entry.file);
  const std::string who =
      "shard '" + file + "' (rank " + std::to_string(rank) + " of " + std::to_string(m.world_size) + ")";
  std::optional<CheckedPayload> payload;
  try {
    payload = read_checked_file(file, kShardMagic, kShardVersion, "snapshot shard");
  } catch (const CheckedFileError& e) {
    throw sharded_error(path, "has a " + who + " that " + e.what());
  }
  if (!payload) throw sharded_error(path, "lists a " + who + " that is missing");
  if (payload->crc != entry.crc)
    throw sharded_error(path, "has a " + who + " with checksum " + hex32(payload->crc) + " where the manifest lists " +
                                  hex32(entry.crc) + ": it belongs to another save");
  torch::serialize::InputArchive archive;
  try {
    std::istringstream stream(payload->bytes);
    archive.load_from(stream, torch::kCPU);
  } catch (const c10::Error& e) {
    throw sharded_error(path, "has a " + who + " that cannot be unpacked: " + e.what_without_backtrace());
  }
  ShardContents c;
  const auto& buckets = m.json.at("buckets");
  for (size_t k = 0; k < buckets.size(); ++k) {
    const int64_t slice = buckets[k].at("padded_numel").get<int64_t>() / m.world_size;
    for (auto [name, list] : {std::pair{"params", &c.params}, {"exp_avg", &c.exp_avg}, {"exp_avg_sq", &c.exp_avg_sq}}) {
      torch::Tensor t;
      const std::string key = "bucket/" + std::to_string(k) + "/" + name;
      if (!archive.try_read(key, t) || t.dim() != 1 || t.numel() != slice)
        throw sharded_error(path, "has a " + who + " without a " + std::to_string(slice) + "-element '" + key + "'");
      list->push_back(t);
    }
  }
  archive.try_read("rng/cpu", c.rng_cpu);
  archive.try_read("rng/cuda", c.rng_cuda);
  if (rank == 0)
    for (const auto& name : m.buffers) {
      torch::Tensor t;
      if (!archive.try_read("buffer/" + name, t, /*is_buffer=*/true))
        throw sharded_error(path, "has a " + who + " without the buffer '" + name + "'");
      c.buffers[name] = t;
    }
  return c;
}

std::vector<std::string> buffer_names(torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& b : module.named_buffers(true)) names.push_back(b.key());
  return names;
}

// The model must be the one the snapshot was written by: names and shapes, in order.
void check_model(const std::string& path, const Manifest& m, const std::vector<ShardedParameter>& params,
                 torch::nn::Module& module) {
  const auto& saved = m.json.at("parameters");
  if (saved.size() != params.size())
    throw sharded_error(path, "holds " + std::to_string(saved.size()) + " parameters, the model has " +
                                  std::to_string(params.size()) + ": it was written by another model");
  for (size_t i = 0; i < params.size(); ++i) {
    const auto shape = saved[i].at("shape").get<std::vector<int64_t>>();
    if (saved[i].at("name").get<std::string>() != params[i].name || shape != params[i].shape)
      throw sharded_error(path, "holds '" + saved[i].at("name").get<std::string>() + "' of shape " +
                                    c10::str(c10::IntArrayRef(shape)) + " where the model has '" + params[i].name +
                                    "' of shape " + c10::str(c10::IntArrayRef(params[i].shape)) +
                                    ": it was written by another model");
  }
  if (m.buffers != buffer_names(module))
    throw sharded_error(path, "holds other buffers than the model's: it was written by another model");
}

// The full tensors (per parameter) of one field of the saved state, from all shards: each saved
// bucket is the concatenation of its slices, each parameter a piece of its bucket.
std::vector<torch::Tensor> reassemble(const Manifest& m, const std::vector<ShardContents>& shards,
                                      std::vector<torch::Tensor> ShardContents::*field) {
  const auto& saved = m.json.at("parameters");
  std::vector<torch::Tensor> full(saved.size());
  const auto& buckets = m.json.at("buckets");
  for (size_t k = 0; k < buckets.size(); ++k) {
    std::vector<torch::Tensor> slices;
    for (const auto& s : shards) slices.push_back((s.*field)[k]);
    const auto flat = torch::cat(slices);
    for (const auto& member : buckets[k].at("members")) {
      const auto p = member[0].get<size_t>();
      const auto offset = member[1].get<int64_t>();
      const auto shape = saved.at(p).at("shape").get<std::vector<int64_t>>();
      full.at(p) = flat.narrow(0, offset, numel_of(shape)).view(shape);
    }
  }
  return full;
}

// This rank's slice of every group of the current layout, cut from full per-parameter tensors
// (in host memory, one group at a time).
std::vector<torch::Tensor> slices_of(const ShardedState& state, int rank, int world,
                                     const std::vector<torch::Tensor>& full) {
  std::vector<torch::Tensor> out;
  for (const auto& g : state.sharded_groups()) {
    auto flat = torch::zeros({g.padded_numel}, full.at(g.params.at(0)).options());
    for (size_t s = 0; s < g.params.size(); ++s) {
      const auto& t = full.at(g.params[s]);
      flat.narrow(0, g.offsets[s], t.numel()).copy_(t.reshape({-1}));
    }
    const int64_t slice = g.padded_numel / world;
    out.push_back(flat.narrow(0, rank * slice, slice).clone());
  }
  return out;
}

void set_rng(const ShardContents& c, const torch::Device& device) {
  if (c.rng_cpu.defined()) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();  // a handle: setting it sets the global one
    cpu.set_state(c.rng_cpu.cpu());
  }
#ifdef DDPW_HAVE_CUDA
  if (device.is_cuda() && c.rng_cuda.defined()) {
    at::Generator cuda = at::cuda::detail::getDefaultCUDAGenerator(device.index());
    cuda.set_state(c.rng_cuda.cpu());
  }
#else
  (void)device;
#endif
}

// Who wrote a snapshot: the manifest's "program" entry (absent when no owner was given), the
// writer's label and the dataset (models of equal shapes trained on different data differ); one
// written before the writer's label still reads (snapshot.h's detail::owner_from_manifest_entry).
Json identity_of(const SnapshotOwner& o) { return Json::parse(detail::owner_to_manifest_entry(o)); }
SnapshotOwner owner_of(const Json& id) { return detail::owner_from_manifest_entry(id.dump()); }

// Another program's snapshot would load (same model) and resume the wrong run: refused, naming both.
void check_writer(const std::string& path, const Manifest& m, const SnapshotOwner& owner) {
  const auto theirs = m.json.find("program");
  if (theirs != m.json.end() && theirs->is_object() && owner_of(*theirs) == owner) return;
  throw Error("sharded snapshot '" + path + "' was written by " +
                  (theirs == m.json.end() || !theirs->is_object()
                       ? std::string("a program that recorded no name (a test or a benchmark)")
                       : owner_of(*theirs).label()) +
                  ", not by this run, " + owner.label() + "; it was left untouched",
              "give this run its own file with " + setting_value(Setting::kSnapshotPath, "PATH") +
                  ", or start it over with " + setting_name(Setting::kFreshStart) +
                  " (its first save then replaces the file)");
}

void save_sharded(const std::string& path, ShardedAdamW& optimizer, const TrainingState& state, const Json* identity) {
  ShardedState& r = optimizer.state();
  ProcessGroup& pg = r.process_group();
  // Mixed precision: the scaler's state and Adam's count of applied steps (host reads; a save waits anyway).
  std::optional<GradScalerState> scaler;
  int64_t applied = 0;
  if (optimizer.grad_scaler()) {
    scaler = optimizer.grad_scaler()->state();
    applied = optimizer.applied_steps().item<int64_t>();
  }
  const int rank = pg.rank(), world = pg.size();

  // The generation after the current manifest's (rank 0 reads it; a broken one counts as none).
  std::optional<Manifest> previous;
  if (rank == 0) attempt([&] { previous = read_manifest(path); });
  auto generation = torch::tensor({previous ? previous->generation + 1 : int64_t{1}}, torch::kInt64).to(pg.device());
  std::vector<torch::Tensor> message{generation};
  pg.broadcast(message, 0, "sharded snapshot (generation number)");
  const int64_t gen = generation.item<int64_t>();

  // Every rank writes its shard.
  const std::string my_file = shard_name(path, gen, rank, world);
  std::string written;  // "<bytes> <crc>"
  auto problem = attempt([&] {
    torch::serialize::OutputArchive archive;
    // Copies in host memory (a slice alone would save its whole bucket's storage).
    const auto host = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, t.scalar_type(), false, true); };
    const auto params = r.parameter_shards();
    for (size_t k = 0; k < params.size(); ++k) {
      const std::string b = "bucket/" + std::to_string(k) + "/";
      archive.write(b + "params", host(params[k]));
      archive.write(b + "exp_avg", host(optimizer.exp_avg_shards()[k]));
      archive.write(b + "exp_avg_sq", host(optimizer.exp_avg_sq_shards()[k]));
    }
    archive.write("rng/cpu", at::detail::getDefaultCPUGenerator().get_state());
#ifdef DDPW_HAVE_CUDA
    const auto device = params[0].device();
    if (device.is_cuda())
      archive.write("rng/cuda", at::cuda::detail::getDefaultCUDAGenerator(device.index()).get_state());
#endif
    if (rank == 0)
      for (const auto& b : r.module().named_buffers(true))
        archive.write("buffer/" + b.key(), host(b.value()), /*is_buffer=*/true);
    std::ostringstream stream;
    archive.save_to(stream);
    const std::string payload = stream.str();
    write_checked_file(beside(path, my_file), kShardMagic, kShardVersion, payload,
                       setting_name(Setting::kSnapshotPath));
    written = std::to_string(payload.size() + 24) + " " + std::to_string(crc32(payload));
  });
  if (problem)
    problem = Error("rank " + std::to_string(rank) + " could not write its snapshot shard: " + problem->message(),
                    problem->hint());
  const auto reports = pg.all_gather_strings(problem ? "-" : written);
  agree(pg, problem);  // a rank that failed: every rank stops here, the previous snapshot stays

  // Rank 0 publishes the manifest (the commit point), then removes the previous generation's shards.
  std::optional<Error> commit;
  if (rank == 0) {
    commit = attempt([&] {
      Json manifest;
      manifest["format"] = kFormat;
      manifest["version"] = kManifestVersion;
      if (identity) manifest["program"] = *identity;
      manifest["generation"] = gen;
      manifest["world_size"] = world;
      manifest["zero_stage"] = r.zero_stage();
      manifest["engine"] = r.sharded_engine();
      manifest["training"] = {
          {"epochs_run", state.epochs_run}, {"step_in_epoch", state.step_in_epoch}, {"world_size", state.world_size}};
      const auto& o = optimizer.options();
      manifest["optimizer"] = {{"type", o.decoupled_weight_decay ? "AdamW" : "Adam"},
                               {"steps_taken", optimizer.steps_taken()},
                               {"lr", o.lr},
                               {"betas", {o.beta1, o.beta2}},
                               {"eps", o.eps},
                               {"weight_decay", o.weight_decay}};
      if (scaler) {
        manifest["optimizer"]["steps_applied"] = applied;
        manifest["grad_scaler"] = {{"scale", scaler->scale}, {"growth_tracker", scaler->growth_tracker}};
      }
      manifest["parameters"] = parameters_of(r.sharded_parameters());
      manifest["buffers"] = buffer_names(r.module());
      manifest["buckets"] = layout_of(r);
      Json shards = Json::array();
      for (int k = 0; k < world; ++k) {
        std::istringstream report(reports[k]);
        uint64_t bytes = 0;
        uint32_t crc = 0;
        report >> bytes >> crc;
        shards.push_back(
            {{"rank", k}, {"file", shard_name(path, gen, k, world)}, {"bytes", bytes}, {"crc32", hex32(crc)}});
      }
      manifest["shards"] = shards;
      write_file_atomically(path, manifest.dump(2) + "\n", setting_name(Setting::kSnapshotPath));
    });
    if (!commit && previous)
      for (const auto& old : previous->shards)
        if (old.file.rfind(base_name(path) + ".g" + std::to_string(gen) + ".", 0) != 0)
          std::remove(beside(path, old.file).c_str());
  }
  agree(pg, commit);
}

std::optional<TrainingState> load_sharded(const std::string& path, ShardedAdamW& optimizer,
                                          const SnapshotOwner* owner) {
  ShardedState& r = optimizer.state();
  ProcessGroup& pg = r.process_group();
  const int rank = pg.rank(), world = pg.size();
  const auto shards_now = r.parameter_shards();
  const auto device = shards_now.at(0).device();

  // Every rank reads the manifest; all must see the same one (a folder not shared would differ).
  std::optional<Manifest> m;
  auto problem = attempt([&] {
    m = read_manifest(path);
    if (m && owner) check_writer(path, *m, *owner);
    if (m) check_model(path, *m, r.sharded_parameters(), r.module());
  });
  const auto seen = pg.all_gather_strings(problem ? "error"
                                          : m     ? "generation " + std::to_string(m->generation)
                                                  : "none");
  agree(pg, problem);
  for (const auto& s : seen)
    if (s != seen[0])
      throw Error(
          "the ranks see different sharded snapshots at '" + path + "' (rank 0: " + seen[0] + ", another: " + s + ")",
          "put " + setting_name(Setting::kSnapshotPath) + " on a filesystem that every node shares");
  if (!m) return std::nullopt;

  // Read (and check) before changing anything, in host memory; then every rank agrees before
  // anyone changes. With the layout it was written in, a rank reads only its own shard; otherwise
  // every rank reads all shards, reassembles the parameters and takes its new slice of each group.
  const bool same_layout = m->world_size == world && m->json.at("buckets") == layout_of(r);  // (checked on reading)
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;  // this rank's slices, current layout
  ShardContents mine;
  problem = attempt([&] {
    if (same_layout) {
      mine = read_shard(path, *m, rank);
      params = mine.params, exp_avg = mine.exp_avg, exp_avg_sq = mine.exp_avg_sq;
      return;
    }
    std::vector<ShardContents> all;
    for (int k = 0; k < m->world_size; ++k) all.push_back(read_shard(path, *m, k));
    params = slices_of(r, rank, world, reassemble(*m, all, &ShardContents::params));
    exp_avg = slices_of(r, rank, world, reassemble(*m, all, &ShardContents::exp_avg));
    exp_avg_sq = slices_of(r, rank, world, reassemble(*m, all, &ShardContents::exp_avg_sq));
    auto buffers = std::move(all[0].buffers);                // rank 0's shard holds them
    mine = std::move(all[rank < m->world_size ? rank : 0]);  // its RNG state: this rank's if it had one
    mine.buffers = std::move(buffers);
  });
  agree(pg, problem);

  {
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < shards_now.size(); ++k) {
      shards_now[k].detach().copy_(params[k]);
      optimizer.exp_avg_shards()[k].copy_(exp_avg[k]);
      optimizer.exp_avg_sq_shards()[k].copy_(exp_avg_sq[k]);
    }
    if (rank == 0)
      for (auto& b : r.module().named_buffers(true)) b.value().copy_(mine.buffers.at(b.key()));
  }
  r.parameter_shards_changed();
  if (world > 1) {  // rank 0's buffers to all (they are in rank 0's shard only)
    std::vector<torch::Tensor> buffers = r.module().buffers(true);
    for (auto& b : buffers) {
      std::vector<torch::Tensor> one{b};
      pg.broadcast(one, 0, "sharded snapshot (buffers from rank 0)");
    }
  }
  set_rng(mine, device);
  optimizer.set_steps_taken(m->steps_taken, m->steps_applied);
  if (optimizer.grad_scaler() && m->grad_scaler) optimizer.grad_scaler()->load_state(*m->grad_scaler);

  TrainingState state = m->training;
  if (state.world_size != world && state.step_in_epoch > 0) {
    if (rank == 0)
      std::fprintf(stderr,
                   "warning: sharded snapshot '%s' was taken by %lld rank(s) at step %lld of epoch %lld; with %d "
                   "rank(s) the data shards differ, so epoch %lld restarts from its first step\n",
                   path.c_str(), static_cast<long long>(state.world_size), static_cast<long long>(state.step_in_epoch),
                   static_cast<long long>(state.epochs_run), world, static_cast<long long>(state.epochs_run));
    state.step_in_epoch = 0;
  }
  return state;
}

}  // namespace

void save_sharded_snapshot(const std::string& path, ShardedAdamW& optimizer, const TrainingState& state,
                           const std::optional<SnapshotOwner>& owner) {
  if (!owner) return save_sharded(path, optimizer, state, nullptr);
  const Json identity = identity_of(*owner);
  save_sharded(path, optimizer, state, &identity);
}

std::optional<TrainingState> load_sharded_snapshot(const std::string& path, ShardedAdamW& optimizer,
                                                   const std::optional<SnapshotOwner>& owner) {
  return load_sharded(path, optimizer, owner ? &*owner : nullptr);
}

std::string sharded_snapshot_writer(const std::string& path) {
  try {
    const auto m = read_manifest(path);
    if (!m) return "";
    const auto program = m->json.find("program");
    return program == m->json.end() ? "" : owner_of(*program).label();
  } catch (const std::exception&) {
    return "";
  }
}

void load_sharded_model_weights(const std::string& path, torch::nn::Module& model) {
  auto m = read_manifest(path);
  if (!m) throw Error("sharded snapshot '" + path + "' does not exist", "train first, or check the path");
  // By name: the groups may hold the parameters in another order than the module's (FSDP's units).
  std::map<std::string, torch::Tensor> mine;
  for (const auto& item : model.named_parameters(true))
    if (item.value().requires_grad()) mine.emplace(item.key(), item.value());
  std::vector<ShardedParameter> params;
  for (const auto& saved : m->json.at("parameters")) {
    const auto name = saved.at("name").get<std::string>();
    const auto it = mine.find(name);
    if (it == mine.end())
      throw sharded_error(path, "holds '" + name + "', which the model does not have: it was written by another model");
    params.push_back({name, it->second.sizes().vec(), it->second.scalar_type()});
  }
  if (params.size() != mine.size())
    throw sharded_error(path, "holds " + std::to_string(params.size()) + " parameters, the model has " +
                                  std::to_string(mine.size()) + ": it was written by another model");
  check_model(path, *m, params, model);
  std::vector<ShardContents> all;
  for (int k = 0; k < m->world_size; ++k) all.push_back(read_shard(path, *m, k));
  const auto full = reassemble(*m, all, &ShardContents::params);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) mine.at(params[i].name).copy_(full[i]);
  for (auto& b : model.named_buffers(true)) b.value().copy_(all[0].buffers.at(b.key()));
}

}  // namespace ddp
