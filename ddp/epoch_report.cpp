#include "ddp/epoch_report.h"

#include <cstdio>

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "ddp/weights_io.h"

namespace ddp {

EpochReporter::EpochReporter(const Options& options, const Workload& workload, torch::Device device, ProcessGroup* pg,
                             int global_rank, int world_size, int local_world_size, int threads)
    : options_(options),
      workload_(workload),
      device_(device),
      pg_(pg),
      global_rank_(global_rank),
      world_size_(world_size),
      local_world_size_(local_world_size),
      threads_(threads) {
}

void EpochReporter::end_epoch(int64_t epoch, double loss_sum, int64_t batches, int64_t samples, double seconds,
                              double data_seconds, Model& model) {
  // One sum over ranks carries everything: the loss, batch and sample totals, and each rank's
  // times in a slot of its own (zero elsewhere), so the sum holds every rank's and the maximum is
  // the slowest rank's. Rank 0 alone would understate an epoch that waited for a slower peer.
  const int64_t n = world_size_;
  auto totals = torch::zeros({3 + 2 * n}, torch::kFloat64);
  totals[0] = loss_sum;
  totals[1] = static_cast<double>(batches);
  totals[2] = static_cast<double>(samples);
  totals[3 + global_rank_] = seconds;
  totals[3 + n + global_rank_] = data_seconds;
  totals = totals.to(device_);
  if (pg_) pg_->allreduce_sum(totals, "end-of-epoch loss sum and times");
  totals = totals.cpu();
  const double train_loss = totals[0].item<double>() / std::max(1.0, totals[1].item<double>());
  const double all_samples = totals[2].item<double>();
  const double slowest = totals.narrow(0, 3, n).max().item<double>();
  const double slowest_data = totals.narrow(0, 3 + n, n).max().item<double>();
  const EvalResult eval = evaluate(model, workload_, options_.test_batch_size, device_, pg_, global_rank_, world_size_);
  if (global_rank_ != 0) return;

  EpochMetrics m;
  m.epoch = epoch;
  m.world_size = world_size_;
  m.ranks_per_node = local_world_size_;
  m.threads = threads_;
  m.train_loss = train_loss;
  m.test_loss = eval.loss;
  m.test_accuracy = eval.accuracy;
  m.epoch_seconds = slowest;
  m.samples_per_s = slowest > 0 ? all_samples / slowest : 0;
  m.data_seconds = slowest_data;
  const double data_percent = slowest > 0 ? 100.0 * slowest_data / slowest : 0;
  // Opened at the first row: a run that fails before its first epoch leaves no file behind.
  if (!metrics_ && !options_.metrics_path.empty())
    metrics_ = std::make_unique<MetricsWriter>(options_.metrics_path, /*append=*/!options_.fresh);
  if (metrics_) metrics_->write(m);
  // "data": the share of the epoch the slowest loader spent producing batches.
  if (workload_.classification)
    std::printf("Epoch %lld | train loss %.4f | test loss %.4f | test accuracy %.2f%% | %.0f samples/s | %.2f s"
                " | data %.1f %%\n",
                static_cast<long long>(epoch), train_loss, eval.loss, 100.0 * eval.accuracy, m.samples_per_s, slowest,
                data_percent);
  else
    std::printf("Epoch %lld | train loss %.6f | test loss %.6f | %.0f samples/s | %.2f s | data %.1f %%\n",
                static_cast<long long>(epoch), train_loss, eval.loss, m.samples_per_s, slowest, data_percent);
  std::fflush(stdout);
}

void EpochReporter::end_training(Model& model, const std::string& tag) {
  torch::NoGradGuard no_grad;
  double checksum = 0;  // position-weighted, so swapped values change it too
  for (const auto& p : model.parameters()) {
    auto flat = p.detach().to(torch::kCPU, torch::kFloat64).reshape({-1});
    checksum += (flat * torch::arange(1, flat.numel() + 1, torch::kFloat64)).sum().item<double>();
  }
  std::printf("%s final weights checksum %.17g\n", tag.c_str(), checksum);
  std::fflush(stdout);
  if (pg_) {
    auto root = torch::tensor({checksum}, torch::kFloat64).to(device_);
    std::vector<torch::Tensor> t{root};
    pg_->broadcast(t, 0, "final weights check");
    auto differs = torch::tensor({root.item<double>() != checksum ? 1.0 : 0.0}, torch::kFloat64).to(device_);
    pg_->allreduce_sum(differs, "final weights check");
    if (differs.item<double>() > 0)
      throw Error("the ranks' final weights differ: the replicas went out of sync",
                  "this is a bug in gradient synchronisation; rerun with NCCL_DEBUG=INFO and report it");
  }
  // After the check, so that only weights every rank agrees on are exported.
  if (global_rank_ == 0 && !options_.export_weights_path.empty()) {
    export_weights(options_.export_weights_path, model);
    std::printf("%s Weights exported to %s (Python: torch.load; see python/README.md)\n", tag.c_str(),
                options_.export_weights_path.c_str());
    std::fflush(stdout);
  }
}

}  // namespace ddp
