#include "ddp/detail/collective_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "ddp/detail/text.h"  // defines: dtype_name, fnv1a, shortened_list
#include "ddp/error.h"

namespace ddp {
namespace {

using detail::dtype_name;

std::string describe_one(const at::Tensor& t, bool shape = true) {
  std::string text = dtype_name(t.scalar_type());
  if (!shape) return text;
  text += " [";
  for (int64_t d = 0; d < t.dim(); ++d) text += (d ? ", " : "") + std::to_string(t.size(d));
  return text + "]";
}

std::string dtypes_of(const std::vector<at::Tensor>& tensors) {
  std::string text;
  for (const auto& t : tensors) text += (text.empty() ? "" : ", ") + describe_one(t, false);
  return text;
}

std::string op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "sum";
    case c10d::ReduceOp::AVG: return "avg";
    case c10d::ReduceOp::PRODUCT: return "product";
    case c10d::ReduceOp::MIN: return "min";
    case c10d::ReduceOp::MAX: return "max";
    case c10d::ReduceOp::BAND: return "band";
    case c10d::ReduceOp::BOR: return "bor";
    case c10d::ReduceOp::BXOR: return "bxor";
    case c10d::ReduceOp::PREMUL_SUM: return "premul_sum";
    default: return "op " + std::to_string(static_cast<int>(op.op_));
  }
}

std::string error_text(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

}  // namespace

const char* const kMismatchHint =
    "every rank must call the same collectives in the same order with the same sizes and dtypes: a collective "
    "inside a rank guard (if rank == 0) or a loop whose length differs by rank?";

std::vector<uint8_t> CallPrint::encode() const {
  std::vector<uint8_t> bytes(kBytes, 0);
  std::memcpy(bytes.data(), &seq, 8);
  std::memcpy(bytes.data() + 8, &hash, 8);
  std::string text = host + '\t' + call;
  const size_t room = kBytes - 16 - 1;  // a zero ends the text
  if (text.size() > room) text = text.substr(0, room - 3) + "...";
  std::memcpy(bytes.data() + 16, text.data(), text.size());
  return bytes;
}

std::optional<CallPrint> CallPrint::decode(const uint8_t* bytes, int64_t n) {
  if (n != kBytes) return std::nullopt;
  CallPrint p;
  std::memcpy(&p.seq, bytes, 8);
  std::memcpy(&p.hash, bytes + 8, 8);
  const char* text = reinterpret_cast<const char*>(bytes + 16);
  const std::string all(text, strnlen(text, kBytes - 16));
  const auto tab = all.find('\t');
  if (tab == std::string::npos) return std::nullopt;
  p.host = all.substr(0, tab);
  p.call = all.substr(tab + 1);
  return p;
}

std::string describe_tensors(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return "no tensors";
  std::string text;
  const size_t shown = tensors.size() > 4 ? 3 : tensors.size();
  for (size_t i = 0; i < shown; ++i) text += (i ? ", " : "") + describe_one(tensors[i]);
  if (shown < tensors.size()) text += ", ... (" + std::to_string(tensors.size()) + " tensors)";
  return text;
}

std::string describe_mismatch(int64_t seq, const std::vector<CallPrint>& prints) {
  if (prints.empty()) return "";
  const bool all_same = std::all_of(prints.begin(), prints.end(), [&](const CallPrint& p) {
    return p.hash == prints.front().hash && p.seq == prints.front().seq;
  });
  if (all_same) return "";
  // Ranks with the same call together, in the order their first rank comes.
  std::vector<std::vector<int>> groups;
  std::map<std::pair<uint64_t, int64_t>, size_t> group_of;
  for (size_t r = 0; r < prints.size(); ++r) {
    const auto key = std::make_pair(prints[r].hash, prints[r].seq);
    auto [it, fresh] = group_of.emplace(key, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(static_cast<int>(r));
  }
  std::string text = "collective " + std::to_string(seq) + " differs across ranks: ";
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g];
    const CallPrint& first = prints[static_cast<size_t>(ranks.front())];
    if (g) text += "; ";
    if (ranks.size() == 1) {
      text += "rank " + std::to_string(ranks.front()) + " @ " + first.host;
    } else {
      std::vector<std::string> numbers;
      for (int r : ranks) numbers.push_back(std::to_string(r));
      text += "ranks " + detail::shortened_list(numbers, 8);
      text += " (rank " + std::to_string(ranks.front()) + " @ " + first.host + ")";
    }
    text += ": " + first.call;
    if (first.seq != seq) text += " (its collective " + std::to_string(first.seq) + ")";
  }
  return text;
}

CheckedBackend::CheckedBackend(c10::intrusive_ptr<c10d::Backend> inner, c10::intrusive_ptr<c10d::Backend> helper,
                               std::chrono::milliseconds timeout, std::string host, Hooks hooks)
    : c10d::Backend(inner->getRank(), inner->getSize()),
      inner_(std::move(inner)),
      helper_(std::move(helper)),
      timeout_(timeout),
      host_(std::move(host)),
      hooks_(std::move(hooks)) {
  setBoundDeviceId(inner_->getBoundDeviceId());
  pg_uid_ = inner_->getGroupUid();
  pg_desc_ = inner_->getGroupDesc();
}

int64_t CheckedBackend::checked() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return helper_ ? seq_ : 0;
}

int64_t CheckedBackend::issued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seq_;
}

int64_t CheckedBackend::number_of(const c10d::Work& work) {
  std::lock_guard<std::mutex> lock(works_mutex_);
  // Newest first: a work's address may be an older, finished work's again.
  for (auto it = works_.rbegin(); it != works_.rend(); ++it) {
    if (it->first != &work) continue;
    const int64_t seq = it->second;
    works_.erase(std::next(it).base());
    return seq;
  }
  return 0;
}

void CheckedBackend::remember(const c10::intrusive_ptr<c10d::Work>& work, int64_t seq) {
  if (!work) return;
  std::lock_guard<std::mutex> works_lock(works_mutex_);
  works_.emplace_back(work.get(), seq);
  if (works_.size() > kRemembered) works_.pop_front();
}

template <typename Describe, typename Issue>
c10::intrusive_ptr<c10d::Work> CheckedBackend::run(const Describe& describe, const Issue& issue) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t seq = ++seq_;
  if (helper_) check(seq, describe());
  c10::intrusive_ptr<c10d::Work> work = issue();
  remember(work, seq);
  return work;
}

// Called with mutex_ held.
void CheckedBackend::check(int64_t seq, const std::string& call) {
  CallPrint mine;
  mine.seq = seq;
  mine.hash = detail::fnv1a(call);  // the same on every rank
  mine.host = host_;
  mine.call = call;
  const auto bytes = mine.encode();
  std::vector<at::Tensor> input{
      torch::from_blob(const_cast<uint8_t*>(bytes.data()), {CallPrint::kBytes}, torch::kUInt8).clone()};
  std::vector<std::vector<at::Tensor>> output(1);
  for (int r = 0; r < size_; ++r) output[0].push_back(torch::empty({CallPrint::kBytes}, torch::kUInt8));
  const std::string what = "the collective check before collective " + std::to_string(mine.seq) + " (" + call + ")";
  if (hooks_.entering) hooks_.entering(seq, "the collective check of " + call);
  const auto start = std::chrono::steady_clock::now();
  try {
    helper_->allgather(output, input)->wait(timeout_);
  } catch (const std::exception& e) {
    hooks_.fail(what, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), error_text(e));
    throw;  // fail throws; should it not, the check's own error
  }
  std::vector<CallPrint> prints;
  for (int r = 0; r < size_; ++r) {
    auto p = CallPrint::decode(output[0][static_cast<size_t>(r)].data_ptr<uint8_t>(), CallPrint::kBytes);
    if (!p) {  // not our fingerprint: that rank's helper is out of step, itself a mismatch
      p = CallPrint{};
      p->host = "?";
      p->call = "(an unreadable fingerprint)";
    }
    prints.push_back(*p);
  }
  const std::string message = describe_mismatch(mine.seq, prints);
  if (message.empty()) return;
  if (hooks_.failing) hooks_.failing(message);
  throw Error(message, kMismatchHint);
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  return run(
      [&] { return "broadcast from rank " + std::to_string(opts.rootRank) + " of " + describe_tensors(tensors); },
      [&] { return inner_->broadcast(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  return run([&] { return "allreduce (" + op_name(opts.reduceOp) + ") of " + describe_tensors(tensors); },
             [&] { return inner_->allreduce(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                   const c10d::AllreduceCoalescedOptions& opts) {
  return run([&] { return "allreduce_coalesced (" + op_name(opts.reduceOp) + ") of " + describe_tensors(tensors); },
             [&] { return inner_->allreduce_coalesced(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::reduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::ReduceOptions& opts) {
  return run(
      [&] {
        return "reduce (" + op_name(opts.reduceOp) + ") to rank " + std::to_string(opts.rootRank) + " of " +
               describe_tensors(tensors);
      },
      [&] { return inner_->reduce(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  return run([&] { return "allgather of " + describe_tensors(inputs); },
             [&] { return inner_->allgather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                               const c10d::AllgatherOptions& opts) {
  return run(
      [&] { return "allgather_into_tensor of " + describe_tensors({input}) + " into " + describe_tensors({output}); },
      [&] { return inner_->_allgather_base(output, input, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::AllgatherOptions& opts) {
  return run([&] { return "allgather_coalesced of " + describe_tensors(inputs); },
             [&] { return inner_->allgather_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::GatherOptions& opts) {
  return run([&] { return "gather to rank " + std::to_string(opts.rootRank) + " of " + describe_tensors(inputs); },
             [&] { return inner_->gather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ScatterOptions& opts) {
  return run(
      [&] { return "scatter from rank " + std::to_string(opts.rootRank) + " into " + describe_tensors(outputs); },
      [&] { return inner_->scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                              std::vector<std::vector<at::Tensor>>& inputs,
                                                              const c10d::ReduceScatterOptions& opts) {
  return run([&] { return "reduce_scatter (" + op_name(opts.reduceOp) + ") into " + describe_tensors(outputs); },
             [&] { return inner_->reduce_scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::ReduceScatterOptions& opts) {
  return run(
      [&] {
        return "reduce_scatter_tensor (" + op_name(opts.reduceOp) + ") of " + describe_tensors({input}) + " into " +
               describe_tensors({output});
      },
      [&] { return inner_->_reduce_scatter_base(output, input, opts); });
}

// Uneven splits differ by rank: only the dtypes are compared.
c10::intrusive_ptr<c10d::Work> CheckedBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& output_splits,
                                                             std::vector<int64_t>& input_splits,
                                                             const c10d::AllToAllOptions& opts) {
  return run([&] { return "alltoall of " + dtypes_of({input}) + " into " + dtypes_of({output}); },
             [&] { return inner_->alltoall_base(output, input, output_splits, input_splits, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllToAllOptions& opts) {
  return run([&] { return "alltoall (list) of " + dtypes_of(inputs) + " into " + dtypes_of(outputs); },
             [&] { return inner_->alltoall(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::barrier(const c10d::BarrierOptions& opts) {
  return run([&] { return "barrier"; }, [&] { return inner_->barrier(opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceOptions& opts) {
  return run([&] { return "allreduce_sparse (" + op_name(opts.reduceOp) + ") of " + describe_tensors(tensors); },
             [&] { return inner_->allreduce_sparse(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::AllgatherOptions& opts) {
  return run(
      [&] {
        return "allgather_into_tensor_coalesced of " + describe_tensors(inputs) + " into " + describe_tensors(outputs);
      },
      [&] { return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::ReduceScatterOptions& opts) {
  return run(
      [&] {
        return "reduce_scatter_tensor_coalesced (" + op_name(opts.reduceOp) + ") of " + describe_tensors(inputs) +
               " into " + describe_tensors(outputs);
      },
      [&] { return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts); });
}

void CheckedBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  run([&] { return std::string("monitored barrier"); },
      [&] {
        inner_->monitoredBarrier(opts, wait_all_ranks);
        return c10::intrusive_ptr<c10d::Work>();  // it returns when every rank came
      });
}

c10::intrusive_ptr<c10d::Backend> CheckedBackend::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts_override) {
  return inner_->shrink(ranks_to_exclude, shrink_flags, opts_override);
}

c10::intrusive_ptr<c10d::Backend> CheckedBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::vector<int>& ranks,
                                                        const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  return inner_->split(store, ranks, opts);
}

c10::intrusive_ptr<c10d::Backend> CheckedBackend::merge(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                                        const int& rank, const int& size) {
  return inner_->merge(store, opts, rank, size);
}

void CheckedBackend::startCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  inner_->startCoalescing();
}

// The coalesced work finishes the block's collectives: filed under the block's last number.
c10::intrusive_ptr<c10d::Work> CheckedBackend::endCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  c10::intrusive_ptr<c10d::Work> work = inner_->endCoalescing();
  remember(work, seq_);
  return work;
}

void CheckedBackend::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  inner_->setGroupUid(pg_uid);
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return inner_->send(tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return inner_->recv(tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return inner_->recvAnysource(tensors, tag);
}

}  // namespace ddp
