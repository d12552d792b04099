#include "ddp/join.h"

#include <algorithm>
#include <vector>

#include "ddp/error.h"

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
                    " batches), or train with an engine that can join (DistributedDataParallel) inside "
                    "ddp::Join, which lets ranks finish at different steps");
}

Join::Join(Joinable& engine) : hook_(engine.join_hook()), pg_(&engine.join_process_group()), name_(engine.join_name()) {
  DDP_CHECK(hook_, name_ + " cannot train on uneven inputs, so it cannot join",
            "construct ddp::Join(model, this rank's number of batches): it checks that every rank has as many");
  flag_ = torch::zeros({3 + pg_->size()}, torch::TensorOptions().dtype(torch::kInt64).device(pg_->device()));
  hook_->set_notifications([this] { notify(); }, [this] { return agree_on_buffer_source(); });
}

Join::Join(Joinable& engine, int64_t batches) : pg_(&engine.join_process_group()), name_(engine.join_name()) {
  hook_ = engine.join_hook();
  if (!hook_) {
    require_even_batches(*pg_, batches, name_);
    return;
  }
  flag_ = torch::zeros({3 + pg_->size()}, torch::TensorOptions().dtype(torch::kInt64).device(pg_->device()));
  hook_->set_notifications([this] { notify(); }, [this] { return agree_on_buffer_source(); });
}

Join::~Join() {
  if (hook_) hook_->set_notifications(nullptr, nullptr);
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
            "Join: rank " + std::to_string(pg_->rank()) + " met a collective other than " + name_ +
                "'s: the ranks are out of step",
            "inside a Join make no collective of your own (a loss allreduce, a barrier, the stop "
            "agreement): move it after Join::finish()");
  return sums;
}

// The highest rank still training: PyTorch's authoritative rank for the buffers.
static int highest_training(const std::vector<int64_t>& sums) {
  int root = -1;
  for (size_t r = 3; r < sums.size(); ++r)
    if (sums[r] > 0) root = static_cast<int>(r - 3);
  DDP_INTERNAL_ASSERT(root >= 0, "Join: no rank still training sent its buffers");
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
  if (!hook_) return 0;  // an engine that cannot join: the counts were checked equal
  hook_->set_notifications(nullptr, nullptr);
  int64_t shadowed = 0;
  while (true) {
    const auto sums =
        exchange_flag(false, false,
                      "Join: allreduce of which ranks still have a batch (rank " + std::to_string(pg_->rank()) +
                          " has none left, after shadowing " + std::to_string(shadowed) + " steps)");
    if (sums[0] == 0) break;
    if (sums[2] > 0) {  // the others broadcast their buffers before a forward: take part
      hook_->shadow_buffer_broadcast(highest_training(sums));
      continue;
    }
    hook_->main_hook();
    ++shadowed;
  }
  hook_->post_hook(last_joiner(shadowed == 0));
  return shadowed;
}

// PyTorch's _sync_final_model: the authoritative rank is the highest of the last joiners (the
// ranks that shadowed nothing, i.e. had the most batches). One allreduce of a per-rank mark finds
// it (the group has a sum, not a max).
int Join::last_joiner(bool me) {
  auto marks = torch::zeros({pg_->size()}, torch::TensorOptions().dtype(torch::kInt64).device(pg_->device()));
  if (me) marks[pg_->rank()] = 1;
  pg_->allreduce_sum(marks, "Join: allreduce of the last ranks to finish");
  const auto host = marks.cpu();
  int root = -1;
  for (int r = 0; r < pg_->size(); ++r)
    if (host[r].item<int64_t>() > 0) root = r;
  DDP_INTERNAL_ASSERT(root >= 0, "Join: no rank finished last");
  return root;
}

}  // namespace ddp
