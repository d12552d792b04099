// defines: KeptBytes, kept_bytes and report_memory — what one rank keeps between two training steps
//          (the optimizer's state, the gradients, the parameters), measured from the tensors it
//          holds (their bytes summed, not a formula): with DDP every rank keeps all of it, with
//          ZeRO-1 1/N of the optimizer state, with ZeRO-2 1/N of the gradients too (step 4's point).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "course/epoch_report.h"
#include "course/models.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/sharded_adamw.h"
#include "ddp/zero_data_parallel.h"

namespace ddpw {

struct KeptBytes {
  int64_t optimizer_state = 0;  // the optimizer's tensors: Adam's moments, Adadelta's averages, SGD's momentum
  int64_t gradients = 0;        // .grad (DDP: views of its buckets), or ZeRO's gradient buckets and slices
  int64_t parameters = 0;
  std::string how;  // "DDP", "ZeRO-2 over 2 ranks", "one process"
};

// Every rank holds the whole model, its .grad and the optimizer's state (DDP, or one process). An
// optimizer whose state this does not know (not SGD, Adam, AdamW or the library's Adadelta) is an error.
KeptBytes kept_bytes(torch::nn::Module& model, const torch::optim::Optimizer& optimizer, std::string how);
KeptBytes kept_bytes(ddp::DistributedDataParallel<Model>& model, const torch::optim::Optimizer& optimizer);
// This rank's slices: the parameters' flat buckets, ZeRO's gradient buckets (stage 1) or slices
// (stage 2), and ShardedAdamW's moments.
KeptBytes kept_bytes(ddp::ZeroDataParallel<Model>& model, const ddp::ShardedAdamW& optimizer);

// "12 B", "96.0 kB", "4.80 MB" (decimal units).
std::string format_bytes(int64_t bytes);

// Every rank prints its own line: "[CPU1] kept between steps: optimizer state 4.80 MB, gradients
// 2.40 MB, parameters 4.80 MB (ZeRO-2 over 2 ranks)". Call it after a step (e.g. the run's first epoch).
void report_memory(const EpochReporter& reporter, const KeptBytes& kept);
template <typename Wrapped, typename Optimizer>
void report_memory(const EpochReporter& reporter, Wrapped& model, const Optimizer& optimizer) {
  report_memory(reporter, kept_bytes(model, optimizer));
}

}  // namespace ddpw
