// defines: ProcessGroup — rendezvous (c10d TCPStore, rank 0 serving, or FileStore for file://)
//          plus a Gloo (CPU, or CUDA tensors through the host) or NCCL (CUDA) backend, with a
//          timeout on every wait and errors that name the host, port, operation and rank.
//
// How a failure, a hang or a stop request reaches the host (read against PyTorch's
// ProcessGroupNCCL, torch 2.11; the NCCL half is confirmed only by a GPU run):
//  * Gloo runs a collective on its own threads; wait() blocks with the collective timeout and
//    throws Gloo's error or timeout. Unchanged. (A dead peer's socket raises SIGPIPE in the writer:
//    a program ignores it with configure_process, as Python does, to get that error.)
//  * NCCL only enqueues: wait() makes the caller's CUDA stream wait, and the host blocks later,
//    in whatever reads a result (.item()), blind to errors and to SIGTERM. PyTorch's watchdog
//    thread times each collective; its default on an error or a timeout
//    (TORCH_NCCL_ASYNC_ERROR_HANDLING=3) kills the process with SIGABRT. So configure_process
//    (process.h; a program's choice, not made here), unless the user set them, asks it to abort
//    the communicator and keep the process (ASYNC_ERROR_HANDLING=2: the
//    GPU work stuck behind the collective is released, the host gets to report), not to dump the
//    flight recorder into a shared /tmp file nor to let its monitor thread kill the process
//    minutes later (DUMP_ON_TIMEOUT=0), and to sleep 4 s, not 60 s, after an error before it
//    aborts (WAIT_TIMEOUT_DUMP_MILSEC=1000; that sleep is there for the dump).
//  * The host waits where it reads a result anyway: the synchronous calls (allreduce_sum,
//    broadcast, barrier, any_rank: the epoch's losses, the stop agreement, the diagnostics). On
//    NCCL they use wait_on_host(), which polls the work (a CUDA event query plus NCCL's async
//    error), the watchdog's verdict (getError), a failure a peer published in the store, the
//    collective timeout and the stop flag, instead of blocking in a CUDA synchronize. After
//    SIGTERM it gives an unfinished collective `stop_grace` to complete; then the caller stops
//    at the agreed step and snapshots. If it does not complete, it fails: the model cannot be
//    read while the stream is stuck behind the collective, so the last snapshot stands.
//    wait() (DDP's end of backward, every step) stays non-blocking on NCCL and only reads the
//    watchdog's verdict.
//  * Every failure is one ddp::Error, for both backends (collective_error):
//      "<what> failed on rank r of n after waiting X s (timeout Y s): <why>" (fix: ...).
//    <why> ends with where the other ranks are, when some are not in this collective: the ranks
//    that never arrived and what each last entered, kept in the store (collective_trace.h).
//    A failing rank publishes "rank r: ..." in the store and, on NCCL, aborts its communicator at
//    once, so the NCCL peers waiting on the host fail within a second, naming it, not at their
//    timeout.
//  * Leaving: on an error path (an exception unwinding, or a failed collective) NCCL is aborted.
//    Otherwise the destructor (or shutdown()) of an NCCL group synchronizes the GPU, meets the
//    other ranks in a store barrier and shuts NCCL down cleanly (finalize + destroy, not the
//    abort of an undestroyed ProcessGroupNCCL, which can drop a peer's last sends); Gloo has
//    nothing to flush. Then, for both, rank 0, whose TCPStore serves the others, waits (at most
//    60 s) until each peer has left before the store goes: a peer's last store read (a gather,
//    NCCL's threads) must not meet a closed server.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "ddp/launch_env.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace ddp {

using CommBackend = c10d::Backend;  // Gloo/NCCL are c10d Backends
class CheckedBackend;               // the group's collectives numbered (and checked): collective_check.h
class CollectiveTrace;              // each rank's last collective, in the store: collective_trace.h

struct ProcessGroupOptions {
  std::string backend = "auto";  // auto: NCCL for CUDA devices, Gloo for CPU
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(10)};
  // After a stop request, how long a host wait still gives an unfinished collective (a
  // preemption leaves tens of seconds before SIGKILL).
  std::chrono::milliseconds stop_grace{std::chrono::seconds(20)};
  // false: rendezvous only; join_backend() later (a program can report every rank before any collective).
  bool join_backend = true;
  // Before each collective, check that every rank calls the same one (op, sizes, dtypes); a rank
  // that differs stops all at once, naming each rank's call (collective_check.h). One extra small
  // Gloo allgather and a host wait per collective: for debugging. Also on when the environment
  // has TORCH_DISTRIBUTED_DEBUG=DETAIL, as in PyTorch.
  bool check_collectives = false;
  // At world size 1 the wrappers skip their per-step collectives (one rank's sum is its own
  // tensors; skips_collectives()). true: they issue them all the same, e.g. to put NCCL's streams
  // and buffers under test on one GPU (NCCL has one-rank communicators). The numbers stay the same.
  bool collectives_at_world_size_1 = false;
};

// One group of all ranks; made by init_process_group, shared by the wrappers that use it.
class ProcessGroup {
 public:
  // Meets the other ranks at the launch's store (rendezvous_timeout), then joins the backend
  // unless options.join_backend is false. Throws ddp::Error naming the host, port and fix.
  ProcessGroup(const LaunchEnv& launch, const torch::Device& device, const ProcessGroupOptions& options);
  ~ProcessGroup();  // shutdown(), or an abort on an error path
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Creates the backend and runs a first collective, so a rank that cannot join fails now. For
  // NCCL it first refuses ranks that would share a GPU (bus ids over the store).
  void join_backend();

  // This rank, the world size, "gloo" or "nccl", the device the group's tensors live on.
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend_name() const { return backend_name_; }
  const torch::Device& device() const { return device_; }
  // Whether the wrappers skip their per-step collectives: at world size 1, unless
  // ProcessGroupOptions::collectives_at_world_size_1 keeps them.
  bool skips_collectives() const { return size_ == 1 && !collectives_at_world_size_1_; }
  // c10d's own backend and store, for what this class does not wrap (waits: use wait()). The
  // backend is a wrapper around it that numbers each collective (the numbers the collective check
  // and the trace give it) and, with the check on, checks it (collective_check.h).
  CommBackend& backend();
  bool checks_collectives() const { return check_collectives_; }
  c10d::Store& store() { return *store_; }

  // The collectives below take tensors on device() only (a ddp::Error naming the call otherwise).
  // Sum over all ranks, in place, asynchronously; finish with wait() or wait_on_host().
  c10::intrusive_ptr<c10d::Work> allreduce_sum_async(std::vector<torch::Tensor>& tensors);
  // After this, results may be used (on NCCL: by work queued on the caller's stream). Gloo: waits
  // with the collective timeout. NCCL: does not block; fails if the watchdog saw an error.
  // Failures throw ddp::Error naming `what`, the rank and how long it waited.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);
  // Blocks the host until the work is complete, watching for failures, the timeout and a stop
  // request (see the header comment); then as wait().
  void wait_on_host(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);

  // Synchronous: on return the result is on the host's side of the stream (NCCL: host wait).
  void allreduce_sum(torch::Tensor& tensor, const std::string& what = "allreduce");
  // Rank `root`'s tensors to every rank, in place; synchronous as allreduce_sum.
  void broadcast(std::vector<torch::Tensor>& tensors, int root, const std::string& what = "broadcast");
  // Every rank has reached it and this rank's queued work is done (NCCL too, as PyTorch's barrier).
  void barrier(const std::string& what = "barrier");

  // Every rank's string, in rank order (through the store; for small things like a rank table).
  std::vector<std::string> all_gather_strings(const std::string& mine);

  // The clean end (PyTorch's destroy_process_group); the destructor calls it if nobody did.
  void shutdown();

 private:
  void check_on_device(const std::vector<torch::Tensor>& tensors, const std::string& what) const;
  void note_failure(const std::string& message, bool publish) noexcept;
  [[noreturn]] void fail(const std::string& what, double waited_s, const std::string& why, bool publish = true);
  std::string group_failure();  // "" while healthy (NCCL's verdict, then the store's)
  void refuse_shared_gpus();
  void join_collective_check();
  void store_barrier(const std::string& name, int expected, bool count_me, bool wait_here,
                     std::chrono::milliseconds timeout);
  void abort_backend() noexcept;
  void finish_wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);  // wait(), not traced
  void trace_wait(const c10d::Work& work, const std::string& what);  // the trace enters the work's collective

  int rank_, size_;
  std::string backend_name_;
  std::string rendezvous_;  // host:port or file://..., for messages
  std::chrono::milliseconds rendezvous_timeout_, collective_timeout_, stop_grace_;
  bool serves_store_ = false;     // rank 0's TCPStore is the rendezvous server
  bool loopback_master_ = false;  // Gloo then binds to 127.0.0.1
  bool failed_ = false, aborted_ = false, shut_down_ = false;
  bool check_collectives_ = false;
  bool collectives_at_world_size_1_ = false;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<CollectiveTrace> trace_;       // each rank's last collective, in the store (collective_trace.h)
  c10::intrusive_ptr<CommBackend> backend_;      // declared after store_: destroyed before it
  c10::intrusive_ptr<CheckedBackend> numbered_;  // backend_ numbered, and checked when the check is on
  torch::Device device_;
  int64_t gather_round_ = 0;
};

// "nccl" for a CUDA device and "gloo" for the CPU when `requested` is "auto"; else `requested`.
std::string resolve_backend(const std::string& requested, const torch::Device& device);

// The one message shape of every collective failure, Gloo's or NCCL's.
Error collective_error(const std::string& what, int rank, int size, double waited_s, double timeout_s,
                       const std::string& why, std::string hint = "");

// The host wait, apart from any process group (so that it can be tested with any c10d::Work).
struct HostWaitPolicy {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds stop_grace{std::chrono::seconds(20)};
  std::function<std::string()> failure;           // "" while all is well, else why the group failed
  std::chrono::milliseconds failure_period{250};  // how often to ask it (it may ask the store)
  std::function<bool()> stop_requested;
};
enum class HostWaitEnd { kCompleted, kFailed, kTimedOut, kStopGraceOver };
struct HostWaitResult {
  HostWaitEnd end;
  double waited_s;
  std::string why;  // for every end but kCompleted
};
// Polls work.isCompleted() (sleeping 20 us to 1 ms between polls), policy.failure, the timeout
// and the stop flag, and returns at the first that ends the wait. Does not call work.wait().
HostWaitResult wait_for_work(c10d::Work& work, const HostWaitPolicy& policy);

// True on every rank if `mine` is true on any rank (pg may be null: one process). A synchronous
// allreduce: the host waits for it (on NCCL watching failures and the stop flag).
bool any_rank(ProcessGroup* pg, bool mine);

// As torch.distributed's init_process_group: one call, one shared group for the program.
std::shared_ptr<ProcessGroup> init_process_group(const LaunchEnv& launch, const torch::Device& device,
                                                 const ProcessGroupOptions& options = {});

}  // namespace ddp
