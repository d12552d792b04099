// defines: Join — PyTorch's torch.distributed.algorithms.Join over any Joinable engine (joinable.h;
//          DistributedDataParallel): ranks that get different numbers of batches (uneven inputs)
//          finish together instead of hanging. require_even_batches — the check for an engine that
//          cannot join (ZeroDataParallel): different counts fail at once on every rank, naming each
//          rank's count.
//
// How (PyTorch's Join with DDP's join hook, divide_by_initial_world_size=True; the engine's part is
// its JoinHook, the protocol below is Join's):
//   * While a Join lives, every synced backward first sums an "I still have a batch" flag over the
//     ranks (one small allreduce, before the gradient buckets).
//   * A rank out of batches calls finish(): it keeps answering the others' collectives ("shadows"
//     them) — the flag with 0, then every gradient bucket's allreduce (and, with
//     find_unused_parameters, the used-parameter allreduce) with zeros — until the flag sums to 0:
//     every rank is out. The others' average still divides by the world size, so a step with k
//     ranks left averages k ranks' gradients over N (PyTorch's default; its
//     divide_by_initial_world_size=False, dividing by k, is not offered).
//   * Then every rank takes the parameters and buffers of the last rank to finish (the highest
//     rank among those that never shadowed), as PyTorch's _sync_final_model does: the ranks that
//     joined early did not step their optimizers for the steps they shadowed. Their optimizer
//     state stays as it was (PyTorch's too).
//   * Buffers (broadcast_buffers, forward_sync.h), as PyTorch's join hook: before each broadcast
//     the ranks still training send the flag marked "buffers" with their rank; the highest of them
//     (the last rank still training: PyTorch's authoritative rank, _find_common_rank) sends its
//     buffers, and the ranks that joined, seeing the mark, take part in that broadcast too. So
//     inside a Join the buffers come from that rank, not rank 0 (rank 0 may have joined long ago).
//   * Inside the Join the only collectives may be the engine's: a joined rank answers every collective as
//     if it were the flag's. Anything else (a loss allreduce per step, the stop agreement) goes
//     after finish(). A flag allreduce paired with another collective is detected (each rank also
//     adds 1 to a second slot) and is an error saying the ranks are out of step.
//   * Every wait has the process group's collective timeout.
//
// Use (every rank; its own number of batches):
//   ddp::Join join(model);
//   for (auto& batch : my_batches) { zero_grad, forward, backward, step }
//   join.finish();
// or ddp::join(model, [&] { ...the loop... }).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/joinable.h"  // defines: Joinable, JoinHook
#include "ddp/process_group.h"

namespace ddp {

// Every rank passes its number of batches; if they differ, every rank throws ddp::Error naming each
// rank's count and the fix. `who` names the caller in the message (e.g. "ZeroDataParallel").
void require_even_batches(ProcessGroup& pg, int64_t batches, const std::string& who);

class Join {
 public:
  // `engine` trains on this rank's own number of batches (DistributedDataParallel). An engine that
  // cannot join (ZeroDataParallel) is an error naming the constructor below.
  explicit Join(Joinable& engine);
  // The same, and for an engine that cannot join, the check that every rank has `batches`
  // batches (require_even_batches), at once; finish() then does nothing.
  Join(Joinable& engine, int64_t batches);
  ~Join();  // stops the notifications; does not communicate (an exception may be unwinding)
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has no batch left: shadows the others' synced backward passes until every rank has
  // called finish(), then every rank takes the last rank's parameters and buffers. Returns how many
  // backward passes this rank shadowed. Once only; for an engine that cannot join (even counts) it
  // does nothing.
  int64_t finish();

 private:
  void notify();                 // a non-joined rank's flag, at the start of each synced backward
  int agree_on_buffer_source();  // a non-joined rank's flag before a buffer broadcast: the source
  // The flag's allreduce; returns [still training, present, buffer broadcast, rank r training...].
  std::vector<int64_t> exchange_flag(bool training, bool buffers, const std::string& what);
  int last_joiner(bool me);

  std::unique_ptr<JoinHook> hook_;  // null: an engine that cannot join, with even counts
  ProcessGroup* pg_ = nullptr;
  std::string name_;    // the engine's join_name(), in messages
  torch::Tensor flag_;  // [has a batch, 1, buffer broadcast, rank r has a batch...], on the group's device
  bool finished_ = false;
};

// Runs body() (this rank's training loop) inside a Join, then finish(). Returns finish()'s count.
template <typename Body>
int64_t join(Joinable& engine, Body&& body) {
  Join j(engine);
  body();
  return j.finish();
}

}  // namespace ddp
