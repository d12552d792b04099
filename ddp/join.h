// defines: Join — PyTorch's torch.distributed.algorithms.Join for DistributedDataParallel: ranks
//          that get different numbers of batches (uneven inputs) finish together instead of hanging.
//          require_even_batches — the check for ZeroDataParallel, which cannot join: different
//          counts fail at once on every rank, naming each rank's count.
//
// How (PyTorch's Join with DDP's join hook, divide_by_initial_world_size=True):
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
//   * Inside the Join the only collectives may be DDP's: a joined rank answers every collective as
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

#include "ddp/distributed_data_parallel.h"
#include "ddp/error.h"  // defines: DDP_CHECK
#include "ddp/process_group.h"
#include "ddp/zero_data_parallel.h"

namespace ddp {

// Every rank passes its number of batches; if they differ, every rank throws ddp::Error naming each
// rank's count and the fix. `who` names the caller in the message (e.g. "ZeroDataParallel").
void require_even_batches(ProcessGroup& pg, int64_t batches, const std::string& who);

class Join {
 public:
  template <typename M>
  explicit Join(DistributedDataParallel<M>& model) : Join(model.reducer(), model.module()) {
    if (model.broadcasts_buffers()) shadow_buffer_broadcast(model.forward_sync());
  }
  // ZeRO cannot join (each rank owns a slice of the optimizer step, which the library cannot run for
  // a rank that has left the loop): the counts must be equal, checked here, at once.
  template <typename M>
  Join(ZeroDataParallel<M>& model, int64_t batches) {
    require_even_batches(model.reducer()->process_group(), batches,
                         "ZeroDataParallel (ZeRO stage " + std::to_string(model.stage()) + ")");
  }
  ~Join();  // stops the flag; does not communicate (an exception may be unwinding)
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has no batch left: shadows the others' synced backward passes until every rank has
  // called finish(), then every rank takes the last rank's parameters and buffers. Returns how many
  // backward passes this rank shadowed. Once only; with ZeRO (even counts) it does nothing.
  int64_t finish();

 private:
  Join(GradientReducer& reducer, std::shared_ptr<torch::nn::Module> module);
  void notify();  // a non-joined rank's flag, at the start of each synced backward
  void shadow_buffer_broadcast(ForwardSync& forward);
  int agree_on_buffer_source();  // a non-joined rank's flag before a buffer broadcast: the source
  // The flag's allreduce; returns [still training, present, buffer broadcast, rank r training...].
  std::vector<int64_t> exchange_flag(bool training, bool buffers, const std::string& what);
  void sync_final_model(bool last_joiner);

  GradientReducer* reducer_ = nullptr;  // null: ZeRO with even counts
  std::shared_ptr<torch::nn::Module> module_;
  ProcessGroup* pg_ = nullptr;
  ForwardSync* forward_ = nullptr;  // set when the forwards broadcast buffers
  torch::Tensor flag_;              // [has a batch, 1, buffer broadcast, rank r has a batch...], on the group's device
  bool finished_ = false;
};

// Runs body() (this rank's training loop) inside a Join, then finish(). Returns finish()'s count.
template <typename M, typename Body>
int64_t join(DistributedDataParallel<M>& model, Body&& body) {
  Join j(model);
  body();
  return j.finish();
}

}  // namespace ddp
