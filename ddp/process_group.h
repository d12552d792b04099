// defines: ProcessGroup — rendezvous (c10d TCPStore, rank 0 serving, or FileStore for file://)
//          plus a Gloo (CPU) or NCCL (CUDA) backend, with a timeout on every wait and errors that
//          name the host, port, operation and rank.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddp/launch_env.h"
#include "ddp/options.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace ddp {

#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;  // 2.x: Gloo/NCCL are Backends
#else
using CommBackend = c10d::ProcessGroup;  // 1.13: they are ProcessGroups
#endif

struct ProcessGroupOptions {
  std::string backend = "auto";  // auto: NCCL for CUDA devices, Gloo for CPU
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(10)};
  bool barrier_on_join = true;  // the diagnostics turn it off to report before any collective
};

class ProcessGroup {
 public:
  ProcessGroup(const LaunchEnv& launch, const torch::Device& device, const ProcessGroupOptions& options);
  ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend_name() const { return backend_name_; }
  const torch::Device& device() const { return device_; }
  CommBackend& backend() { return *backend_; }
  c10d::Store& store() { return *store_; }

  // Sum over all ranks, in place, asynchronously; finish with wait().
  c10::intrusive_ptr<c10d::Work> allreduce_sum_async(std::vector<torch::Tensor>& tensors);
  // Waits with the collective timeout; on failure throws ddp::Error naming `what`, the rank and
  // how long it waited.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);

  void allreduce_sum(torch::Tensor& tensor, const std::string& what = "allreduce");
  void broadcast(std::vector<torch::Tensor>& tensors, int root, const std::string& what = "broadcast");
  void barrier(const std::string& what = "barrier");

  // Every rank's string, in rank order (through the store; for small things like a rank table).
  std::vector<std::string> all_gather_strings(const std::string& mine);

 private:
  int rank_, size_;
  std::string backend_name_;
  std::chrono::milliseconds collective_timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<CommBackend> backend_;
  torch::Device device_;
  int64_t gather_round_ = 0;
};

// True on every rank if `mine` is true on any rank (pg may be null: one process). The trainer
// asks it at every step, so all ranks stop at the same step when one of them got SIGTERM.
bool any_rank(ProcessGroup* pg, bool mine);

// The process-group settings of the command line (--backend, --*-timeout).
ProcessGroupOptions process_group_options(const Options& options);

// The tutorial's init_process_group: one call, one shared group for the program.
std::shared_ptr<ProcessGroup> init_process_group(const LaunchEnv& launch, const torch::Device& device,
                                                 const ProcessGroupOptions& options = {});

}  // namespace ddp
