// defines: CollectiveTrace — what each rank of a group was last doing, kept in the group's store, so
//          that a collective that times out or fails names the ranks that never arrived and what
//          each was doing instead (PyTorch's NCCL timeouts name no culprit: pytorch#118369).
//   * Every wait of the group (ProcessGroup::wait, wait_on_host) is one collective entered: its
//     number, its name (the `what` of the wait: "DDP's gradient allreduce", "stop agreement", ...)
//     and when. The number is the group's one count of the collectives it issued
//     (collective_check.h), given when the collective was issued, not when it is waited for: the
//     same on every rank of a program that calls the same collectives, and the number the
//     collective check's messages give it. With the check on, its wait for the other ranks before
//     collective n is entered too, as #n "the collective check of <the call>".
//   * The hot path only copies that into memory; a thread of the group writes it to the store
//     (key ddpw/trace/<rank>) at most every `period` (200 ms), so a rank that hangs, is stopped or
//     dies leaves there what it last entered. The store is the rendezvous one: on several nodes
//     every rank's record is on rank 0's (or the launcher's) store.
//   * On a failure, report() writes this rank's record at once, reads every rank's and says, for
//     each rank not in this rank's collective, where it is:
//       "rank 1 @ node7 never arrived at #38 ('stop agreement'): its last was #37 'DDP's gradient
//        allreduce', 5.2 s before this report"
//       "rank 2 @ node8 is at #38 but in 'broadcast of the checkpoint' (the ranks call different
//        collectives: one inside a rank guard?)"
//     A rank past this one ("went on to #40 '...'") means this rank skipped collectives the other
//     called. A rank without a record never entered a collective of this group (or its store
//     entry could not be read). When every rank is in this collective, it says so: the collective
//     itself stalled (a rank stopped inside it, or the network).
// Where we differ from PyTorch: its flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) dumps per-rank
// files that a separate tool joins after the fact; this puts the joined answer in the error itself.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ddp {

// One rank's last collective: its number in the group (1 = the first), name, host and when (seconds
// since the epoch).
struct TraceRecord {
  int64_t seq = 0;
  std::string host, what;
  double at = 0;

  std::string encode() const;
  static std::optional<TraceRecord> decode(const std::string& text);  // nullopt if malformed
};

// The sentence naming where the other ranks are against `mine` (rank `rank`'s own record); `all`
// holds every rank's record (nullopt: none), `now` is seconds since the epoch. When every rank is
// in this rank's collective it says so (the collective itself stalled). At most `limit` ranks are
// named, then "and N more".
std::string describe_other_ranks(int rank, const TraceRecord& mine, const std::vector<std::optional<TraceRecord>>& all,
                                 double now, size_t limit = 8);

class CollectiveTrace {
 public:
  CollectiveTrace(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                  std::chrono::milliseconds period = std::chrono::milliseconds(200));
  ~CollectiveTrace();  // stop()
  CollectiveTrace(const CollectiveTrace&) = delete;
  CollectiveTrace& operator=(const CollectiveTrace&) = delete;

  // This rank enters the group's collective number `seq`, named `what` (cheap: no store access).
  void entering(int64_t seq, const std::string& what);

  // Where the other ranks are (describe_other_ranks over the store's records); "" when nothing
  // could be read (the store is gone). Publishes this rank's record first. Never throws.
  std::string report();

  // Ends the publishing thread (a group that leaves: the store may go away). Idempotent.
  void stop();

 private:
  void publish_loop();
  void publish(const TraceRecord& record);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_;
  std::chrono::milliseconds period_;
  std::string host_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  TraceRecord last_;
  bool dirty_ = false, stopping_ = false;
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace ddp
