// defines: CheckedBackend — the collective check (PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL): before
//          each collective, every rank tells the others what it is about to call (op, root or
//          reduce op, each tensor's dtype and shape), and a rank whose call differs stops every
//          rank at once, naming each rank's call, instead of a hang until the collective timeout
//          or, worse, a wrong result (an allreduce met by a broadcast of the same size).
//   * A c10d::Backend that wraps the group's backend (ProcessGroup::backend() returns it when the
//     check is on), so every collective the library issues is checked, whoever issues it.
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
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

// One rank's call, as the check compares and prints it.
struct CallPrint {
  int64_t seq = 0;    // 1 = the group's first checked collective
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
  };
  CheckedBackend(c10::intrusive_ptr<c10d::Backend> inner, c10::intrusive_ptr<c10d::Backend> helper,
                 std::chrono::milliseconds timeout, std::string host, Hooks hooks);

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  int64_t checked() const;  // how many collectives were checked

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
  // Unchecked, passed through.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  void check(const std::string& call);  // throws on a mismatch or a failed check

  c10::intrusive_ptr<c10d::Backend> inner_, helper_;
  std::chrono::milliseconds timeout_;
  std::string host_;
  Hooks hooks_;
  mutable std::mutex mutex_;  // one check at a time, in issue order (autograd may issue from its threads)
  int64_t seq_ = 0;
};

}  // namespace ddp
