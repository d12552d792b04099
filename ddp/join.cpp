#include "ddp/join.h"

#include <algorithm>
#include <vector>

#include "ddp/error.h"
#include "ddp/model_broadcast.h"  // defines: broadcast_tensors

namespace ddp {

void require_even_batches(ProcessGroup& pg, int64_t batches, const std::string& who) {
  DDP_CHECK(batches >= 0, who + ": a negative number of batches (" + std::to_string(batches) + ")",
            "pass the number of batches this rank will train on");
  // Every rank's count in its own slot, summed: every rank sees all of them (and fails alike).
  auto counts = torch::zeros({pg.size()}, torch::TensorOptions().dtype(torch::kInt64).device(pg.device()));
  counts[pg.rank()] = batches;
  pg.allreduce_sum(counts, "agreement on the number of batches per rank (" + who + ")");
  const auto host = counts.cpu();
  const auto* c = host.data_ptr<int64_t>();
  int64_t fewest = c[0];
  bool even = true;
  std::string listing;
  for (int r = 0; r < pg.size(); ++r) {
    even = even && c[r] == c[0];
    fewest = std::min(fewest, c[r]);
    listing += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + std::to_string(c[r]);
  }
  if (!even)
    throw Error("the ranks have different numbers of batches (" + listing + "); " + who +
                    " cannot train on uneven inputs: a rank that ran out would leave its slice of every "
                    "later optimizer step undone",
                "give every rank the same number of batches (a DistributedSampler pads the shards to equal "
                "size; or stop every rank after " +
                    std::to_string(fewest) +
                    " batches), or train with DistributedDataParallel inside ddp::Join, which lets ranks "
                    "finish at different steps");
}

Join::Join(GradientReducer& reducer, std::shared_ptr<torch::nn::Module> module)
    : reducer_(&reducer), module_(std::move(module)), pg_(&reducer.process_group()) {
  flag_ = torch::zeros({3 + pg_->size()}, torch::TensorOptions().dtype(torch::kInt64).device(pg_->device()));
  reducer_->set_before_sync([this] { notify(); });
}

Join::~Join() {
  if (reducer_) reducer_->set_before_sync(nullptr);
  if (forward_) forward_->set_buffer_source(nullptr);
}

void Join::shadow_buffer_broadcast(ForwardSync& forward) {
  forward_ = &forward;
  forward_->set_buffer_source([this] { return agree_on_buffer_source(); });
}

// This rank's flag: [has a batch, 1, before a buffer broadcast, then a 1 in its own slot if it has a batch].
// Slot 1 proves every rank took part in this very collective (a joined rank answering something
// else would make it less than N).
static void set_join_flag(torch::Tensor& flag, int rank, bool training, bool buffers) {
  flag.zero_();
  flag[1] = 1;
  if (training) {
    flag[0] = 1;
    flag[3 + rank] = 1;
  }
  if (buffers) flag[2] = 1;
}

// PyTorch's Join.notify_join_context: this rank still trains.
void Join::notify() {
  set_join_flag(flag_, pg_->rank(), true, false);
  std::vector<torch::Tensor> list{flag_};
  pg_->wait(pg_->allreduce_sum_async(list), "Join: allreduce of which ranks still have a batch");
}

std::vector<int64_t> Join::exchange_flag(bool training, bool buffers, const std::string& what) {
  set_join_flag(flag_, pg_->rank(), training, buffers);
  pg_->allreduce_sum(flag_, what);
  const auto host = flag_.cpu();
  const auto* f = host.data_ptr<int64_t>();
  std::vector<int64_t> sums(f, f + host.numel());
  // Every rank answered, and the ranks still training all sent the same kind of flag.
  DDP_CHECK(sums[1] == pg_->size() && (sums[2] == 0 || sums[2] == sums[0]),
            "Join: rank " + std::to_string(pg_->rank()) +
                " met a collective other than DistributedDataParallel's: the ranks are out of step",
            "inside a Join make no collective of your own (a loss allreduce, a barrier, the stop "
            "agreement): move it after Join::finish()");
  return sums;
}

// The highest rank still training: PyTorch's authoritative rank for the buffers.
static int highest_training(const std::vector<int64_t>& sums) {
  int root = -1;
  for (size_t r = 3; r < sums.size(); ++r)
    if (sums[r] > 0) root = static_cast<int>(r - 3);
  DDP_CHECK(root >= 0, "Join: no rank still training sent its buffers", "this is a bug in ddp::Join; please report it");
  return root;
}

// Before a buffer broadcast of the ranks still training (the joined ones shadow it in finish()).
int Join::agree_on_buffer_source() {
  return highest_training(
      exchange_flag(true, true, "Join: allreduce of which rank sends the buffers (the last one still training)"));
}

int64_t Join::finish() {
  DDP_CHECK(!finished_, "Join::finish() was called twice", "call it once, after this rank's last batch");
  finished_ = true;
  if (!reducer_) return 0;  // ZeRO: the counts were checked equal
  reducer_->set_before_sync(nullptr);
  if (forward_) forward_->set_buffer_source(nullptr);
  int64_t shadowed = 0;
  while (true) {
    const auto sums =
        exchange_flag(false, false,
                      "Join: allreduce of which ranks still have a batch (rank " + std::to_string(pg_->rank()) +
                          " has none left, after shadowing " + std::to_string(shadowed) + " steps)");
    if (sums[0] == 0) break;
    if (sums[2] > 0) {  // the others broadcast their buffers before a forward: take part
      DDP_CHECK(forward_, "Join: the other ranks broadcast buffers before a forward but this rank's model does not",
                "wrap the model the same way (DdpOptions::broadcast_buffers) on every rank");
      forward_->broadcast_buffers_from(highest_training(sums));
      continue;
    }
    reducer_->shadow_backward();
    ++shadowed;
  }
  sync_final_model(shadowed == 0);
  return shadowed;
}

// PyTorch's _sync_final_model: the authoritative rank is the highest of the last joiners (the
// ranks that shadowed nothing, i.e. had the most batches); every rank takes its parameters and
// buffers. One allreduce of a per-rank mark finds it (the group has a sum, not a max).
void Join::sync_final_model(bool last_joiner) {
  torch::NoGradGuard no_grad;
  auto marks = torch::zeros({pg_->size()}, torch::TensorOptions().dtype(torch::kInt64).device(pg_->device()));
  if (last_joiner) marks[pg_->rank()] = 1;
  pg_->allreduce_sum(marks, "Join: allreduce of the last ranks to finish");
  const auto host = marks.cpu();
  int root = -1;
  for (int r = 0; r < pg_->size(); ++r)
    if (host[r].item<int64_t>() > 0) root = r;
  DDP_CHECK(root >= 0, "Join: no rank finished last", "this is a bug in ddp::Join; please report it");
  std::vector<torch::Tensor> state = module_->parameters(/*recurse=*/true);
  for (const auto& b : module_->buffers(/*recurse=*/true)) state.push_back(b);
  broadcast_tensors(state, root, *pg_,
                    "Join: broadcast of the final parameters and buffers from rank " + std::to_string(root));
}

}  // namespace ddp
