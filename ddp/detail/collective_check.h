// defines: CheckedBackend — the group's collectives, numbered, and the collective check (PyTorch's
//          TORCH_DISTRIBUTED_DEBUG=DETAIL): before each collective, every rank tells the others
//          what it is about to call (op, root or reduce op, each tensor's dtype and shape), and a
//          rank whose call differs stops every rank at once, naming each rank's call, instead of a
//          hang until the collective timeout or, worse, a wrong result (an allreduce met by a
//          broadcast of the same size).
//   * A c10d::Backend that wraps the group's backend (ProcessGroup::backend() returns it), so every
//     collective the library issues is numbered, and checked when the check is on, whoever issues it.
//   * The numbers: each collective issued through it gets the group's next number (1 = the first,
//     the barrier that joins the group), the check on or off: the one count of the group's
//     collectives. The check's messages ("collective 38 differs") and the trace's records
//     (collective_trace.h: "#38", the number of the collective a wait is for, from number_of) use
//     it, so a collective has one number in both. With the check off the wrapper only numbers (a
//     lock and a list entry per collective).
//   * The check is an allgather of a 512-byte fingerprint (its number, a hash of the call, the
//     host and the call in words) on a second, CPU-only Gloo backend of the same group: the
//     group's own backend may be NCCL, and on Gloo the check must not queue behind the
//     collectives already in flight (DDP's buckets). It waits at most the collective timeout.
//   * Cost: one extra small collective, and a host wait, per collective: a debug mode, off by
//     default. Point-to-point calls (send, recv) differ across ranks by design and are not checked.
//   * alltoall and gather/scatter compare dtypes and the parts every rank shares (uneven splits
//     and the root's lists legitimately differ).
// Why not c10d's ProcessGroupWrapper (exported by LibTorch, and what PyTorch's DETAIL mode
// wraps around each backend): its mismatch is a c10::Error thrown out of whichever call site
// issued the collective, naming ranks but not hosts, in PyTorch's words (its fingerprint's
// repr), which we could give our shape only by parsing its text; and it adds a monitored barrier
// (a second extra collective) before each one. This does the same check (an allgather of a
// fingerprint on a Gloo helper) and throws ddp::Error in the shape of the group's other errors.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

// One rank's call, as the check compares and prints it.
struct CallPrint {
  int64_t seq = 0;    // the collective's number in its group (1 = the group's first collective)
  uint64_t hash = 0;  // of the call's full text (the printed one may be shortened)
  std::string host;   // where the rank runs
  std::string call;   // "allreduce (sum) of float32 [1234]"

  static constexpr int64_t kBytes = 512;
  std::vector<uint8_t> encode() const;  // kBytes long; the call shortened to fit
  static std::optional<CallPrint> decode(const uint8_t* bytes, int64_t n);
};

// "float32 [1234]"; several tensors: "float32 [10], float32 [5]", more than 4 shortened
// ("float32 [10], ... (12 tensors)").
std::string describe_tensors(const std::vector<at::Tensor>& tensors);

// The one-line message for check `seq` where `prints` (rank order) differ, or "" when all agree.
// Ranks with the same call are named together ("ranks 1, 2, 3 @ host: ..."), at most 8 each.
std::string describe_mismatch(int64_t seq, const std::vector<CallPrint>& prints);
// The fix the mismatch message carries.
extern const char* const kMismatchHint;

class CheckedBackend : public c10d::Backend {
 public:
  struct Hooks {
    // Called with the message before a mismatch is thrown: the group is no longer usable.
    std::function<void(const std::string& message)> failing;
    // The check itself failed (a rank never came to it: timeout, or a peer gone). Must throw.
    std::function<void(const std::string& what, double waited_s, const std::string& why)> fail;
    // This rank waits for the others in the check of collective `seq` (the trace's record).
    std::function<void(int64_t seq, const std::string& what)> entering;
  };
  // `helper` null: the check is off, the collectives are only numbered.
  CheckedBackend(c10::intrusive_ptr<c10d::Backend> inner, c10::intrusive_ptr<c10d::Backend> helper,
                 std::chrono::milliseconds timeout, std::string host, Hooks hooks);

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  bool checking() const { return helper_ != nullptr; }
  int64_t checked() const;  // how many collectives were checked (0 with the check off)
  int64_t issued() const;   // the number of the last collective issued (0: none yet)
  // The number of the collective issued here whose work `work` is, forgotten once asked; 0 when it
  // is not one of this backend's (or one of more than kRemembered issued since and not asked for).
  int64_t number_of(const c10d::Work& work);
  static constexpr size_t kRemembered = 4096;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  // A barrier every rank enters (numbered and checked like one); Gloo's names the ranks that did not come.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks = false) override;
  // Unchecked, passed through.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // Every other c10d::Backend virtual goes to the wrapped backend unchanged, as c10d's
  // ProcessGroupWrapper does: what it supports, coalescing (the collectives between start and
  // end are numbered one by one; the work endCoalescing returns is the inner backend's), sequence
  // numbers, errors, abort and shutdown, eager connection, its allocator, options and hooks.
  // split, merge and shrink return the inner backend's new backend as it is: not numbered.
  bool supportsSplitting() const override { return inner_->supportsSplitting(); }
  bool supportsCoalescing() const override { return inner_->supportsCoalescing(); }
  bool supportsTimeEstimation() const override { return inner_->supportsTimeEstimation(); }
  bool supportsShrinking() const override { return inner_->supportsShrinking(); }
  bool supportsTensorAlloc(c10::DeviceIndex device) override { return inner_->supportsTensorAlloc(device); }
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = 0,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts_override = nullptr) override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts, const int& rank,
                                          const int& size) override;
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return inner_->getBackendOptions(); }
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override {
    inner_->registerOnCompletionHook(std::move(hook));
  }
  void waitForPendingWorks() override { inner_->waitForPendingWorks(); }
  void enableCollectivesTiming() override { inner_->enableCollectivesTiming(); }
  void setGroupUid(const std::string& pg_uid) override;
  void eagerConnectSingleDevice(at::Device device) override { inner_->eagerConnectSingleDevice(device); }
  c10d::ErrorType getError() override { return inner_->getError(); }
  std::shared_ptr<c10::Allocator> getMemAllocator() override { return inner_->getMemAllocator(); }
  at::Tensor allocateTensor(long size,
                            at::TensorOptions options = {}) override {  // NOLINT(google-runtime-int): c10d's type
    return inner_->allocateTensor(size, options);
  }
  void abort() override { inner_->abort(); }
  void shutdown() override { inner_->shutdown(); }

 private:
  // Numbers the collective, checks it when the check is on (`describe`: its call in words), then
  // issues it (`issue`) and remembers its work's number.
  template <typename Describe, typename Issue>
  c10::intrusive_ptr<c10d::Work> run(const Describe& describe, const Issue& issue);
  void check(int64_t seq, const std::string& call);                        // throws on a mismatch or a failed check
  void remember(const c10::intrusive_ptr<c10d::Work>& work, int64_t seq);  // for number_of

  c10::intrusive_ptr<c10d::Backend> inner_, helper_;
  std::chrono::milliseconds timeout_;
  std::string host_;
  Hooks hooks_;
  // One collective at a time is numbered, checked and issued (autograd may issue from its threads),
  // so the numbers follow the order the backend gets the collectives in.
  mutable std::mutex mutex_;
  int64_t seq_ = 0;
  std::mutex works_mutex_;
  std::deque<std::pair<const c10d::Work*, int64_t>> works_;  // issued, not yet asked for: newest last
};

}  // namespace ddp
