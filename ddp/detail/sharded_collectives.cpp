#include "ddp/detail/sharded_collectives.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "ddp/error.h"

namespace ddp {

ReduceScatter::ReduceScatter(ProcessGroup& pg, const torch::Tensor& input, const torch::Tensor& output, bool accumulate)
    : pg_(&pg), input_(input), output_(output), accumulate_(accumulate) {
  const int64_t n = pg.size();
  DDP_INTERNAL_ASSERT(input.numel() == n * output.numel(),
                      "reduce-scatter: the input must hold world size x output elements");
  if (pg.skips_collectives()) return;  // one rank, nothing to exchange: finish() copies
  if (pg.backend_name() == "nccl") {
    // NCCL reduces straight into the output unless the result is to be added to it.
    received_ = accumulate ? torch::empty_like(output) : output;
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    work_ = pg.backend()._reduce_scatter_base(received_, input_, options);
  } else {
    // Gloo: slice j of every rank lands in row j of this rank's [N, S] buffer; finish() sums the rows.
    received_ = torch::empty_like(input);
    std::vector<int64_t> output_splits, input_splits;  // empty: N equal slices
    c10d::AllToAllOptions options;
    work_ = pg.backend().alltoall_base(received_, input_, output_splits, input_splits, options);
  }
}

void ReduceScatter::finish(const std::string& what) {
  if (!pg_) return;
  torch::NoGradGuard no_grad;
  const int64_t n = pg_->size();
  if (pg_->skips_collectives()) {
    if (accumulate_)
      output_.add_(input_);
    else
      output_.copy_(input_);
  } else {
    pg_->wait(work_, what);
    if (pg_->backend_name() == "nccl") {
      if (accumulate_) output_.add_(received_);
    } else {
      const auto rows = received_.view({n, -1});
      if (accumulate_)
        output_.add_(rows.sum(0));
      else
        torch::sum_out(output_, rows, 0);
    }
  }
  // On a GPU the buffers were made on the stream the launch ran on (a gradient hook's), and NCCL read
  // and wrote them on its own stream, which only the stream that waited above (the current one) is
  // ordered after (torch 2.11's NCCL no longer records its tensors' streams). Recorded on that stream,
  // the allocator hands their blocks out again only once it has passed the wait; a no-op where it is
  // the stream they were made on.
  if (input_.is_cuda()) {
    const c10::Stream waited = c10::impl::VirtualGuardImpl(c10::kCUDA).getStream(input_.device());
    input_.record_stream(waited);
    if (received_.defined() && !received_.is_same(output_)) received_.record_stream(waited);
  }
  *this = ReduceScatter();  // releases the buffers
}

void all_gather_slices(ProcessGroup& pg, std::vector<torch::Tensor>& flats, const std::string& what) {
  const int64_t n = pg.size();
  if (pg.skips_collectives()) return;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<torch::Tensor> inputs;
  for (auto& flat : flats) {
    const int64_t slice = flat.numel() / n;
    // In place: this rank's slice is the input. NCCL allows it; Gloo gathers into a buffer of its
    // own and copies the result back afterwards, so its input is never overwritten while it reads.
    inputs.push_back(flat.narrow(0, pg.rank() * slice, slice));
    works.push_back(pg.backend()._allgather_base(flat, inputs.back()));
  }
  for (auto& w : works) pg.wait(w, what);
}

}  // namespace ddp
