#include "course/epoch_report.h"

#include <fmt/format.h>

#include <vector>

#include "course/gpt_sample.h"   // defines: sample_gpt
#include "course/peak_memory.h"  // defines: peak_memory
#include "ddp/device.h"          // defines: device_name
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "ddp/weights_io.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on

EpochLog::EpochLog(int64_t epoch, int64_t first_step, Loader& loader, const std::string& tag, int64_t log_every,
                   StepTrace* trace)
    : epoch_(epoch),
      step_(first_step),
      loader_(&loader),
      progress_(tag, loader.steps(), loader.batch_size(), log_every, first_step),
      start_(std::chrono::steady_clock::now()),
      trace_(trace) {}

void EpochLog::add(const Batch& batch, const torch::Tensor& loss) {
  const torch::Tensor value = loss.detach();
  // Summed in float64 on the loss's device: one small kernel, no copy to the host.
  if (!loss_sum_.defined()) loss_sum_ = torch::zeros({}, value.options().dtype(torch::kFloat64));
  loss_sum_.add_(value);
  ++batches_;
  ++step_;
  samples_ += batch.input.size(0);
  if (trace_) trace_->step_done(epoch_, step_ - 1);  // the step just done, counted from 0
  progress_.update(step_, [this] { return mean_loss(); });
}

double EpochLog::mean_loss() const {
  if (before_read_ && batches_ > 0) before_read_();
  return batches_ > 0 ? loss_sum_.item<double>() / static_cast<double>(batches_) : 0;
}

EpochReporter::EpochReporter(const Options& options, const LaunchEnv& launch, torch::Device device,
                             const Workload& workload, ProcessGroup* pg)
    : options_(options),
      launch_(launch),
      device_(device),
      workload_(workload),
      pg_(pg),
      threads_(at::get_num_threads()) {
  const char* kind = device.is_cuda() ? "GPU" : "CPU";
  tag_ = launch.local_world_size < launch.world_size
             ? fmt::format("[RANK {}: local {} {}]", launch.global_rank, kind, launch.local_rank)
             : fmt::format("[{}{}]", kind, launch.local_rank);
  if (!options.trace_path.empty()) trace_ = std::make_unique<StepTrace>(options, launch.global_rank);
}

EpochLog EpochReporter::begin_epoch(int64_t epoch, Loader& loader, int64_t first_step) {
  if (options_.steps > 0) loader.limit_steps(options_.steps);
  fmt::print("{} Epoch {} | Batchsize: {} | Steps: {}\n", tag_, epoch, loader.batch_size(), loader.steps());
  loader.take_load_seconds();  // this epoch's loading time only
  return EpochLog(epoch, first_step, loader, tag_, options_.log_every, trace_.get());
}

void EpochReporter::end_epoch(EpochLog& log, Model& model) {
  log.progress_.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - log.start_).count();
  // One sum over ranks carries everything: the loss, batch and sample totals, and each rank's
  // times in a slot of its own (zero elsewhere), so the sum holds every rank's and the maximum is
  // the slowest rank's. Rank 0 alone would understate an epoch that waited for a slower peer.
  const int64_t n = launch_.world_size, rank = launch_.global_rank;
  std::vector<double> values(static_cast<size_t>(3 + 2 * n), 0.0);
  values[1] = static_cast<double>(log.batches_);
  values[2] = static_cast<double>(log.samples_);
  values[static_cast<size_t>(3 + rank)] = seconds;
  values[static_cast<size_t>(3 + n + rank)] = log.loader_->take_load_seconds();
  auto totals = torch::tensor(values, torch::kFloat64).to(device_);
  if (log.loss_sum_.defined()) totals.narrow(0, 0, 1).add_(log.loss_sum_);  // it never left the device
  if (pg_) pg_->allreduce_sum(totals, "end-of-epoch loss sum and times");
  totals = totals.cpu();  // the epoch's one wait for the device
  const double* sum = totals.data_ptr<double>();
  const double train_loss = sum[0] / std::max(1.0, sum[1]);
  const double all_samples = sum[2];
  const double slowest = totals.narrow(0, 3, n).max().item<double>();
  const double slowest_data = totals.narrow(0, 3 + n, n).max().item<double>();
  const EvalResult eval =
      evaluate(model, workload_, options_.test_batch_size, device_, pg_, launch_.global_rank, launch_.world_size);
  if (launch_.global_rank != 0) return;

  EpochMetrics m;
  m.epoch = log.epoch_;
  m.world_size = launch_.world_size;
  m.ranks_per_node = launch_.local_world_size;
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
    fmt::print(
        "Epoch {} | train loss {:.4f} | test loss {:.4f} | test accuracy {:.2f}% | {:.0f} samples/s | {:.2f} s"
        " | data {:.1f} %\n",
        m.epoch, train_loss, eval.loss, 100.0 * eval.accuracy, m.samples_per_s, slowest, data_percent);
  else
    fmt::print("Epoch {} | train loss {:.6f} | test loss {:.6f} | {:.0f} samples/s | {:.2f} s | data {:.1f} %\n",
               m.epoch, train_loss, eval.loss, m.samples_per_s, slowest, data_percent);
}

namespace {
double weights_checksum(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  double checksum = 0;  // position-weighted, so swapped values change it too
  for (const auto& p : model.parameters()) {
    auto flat = p.detach().to(torch::kCPU, torch::kFloat64).reshape({-1});
    checksum += (flat * torch::arange(1, flat.numel() + 1, torch::kFloat64)).sum().item<double>();
  }
  return checksum;
}
}  // namespace

void EpochReporter::write_trace() {
  if (!trace_) return;
  const std::string written = trace_->write(pg_);
  if (!written.empty()) print("{}", written);
  trace_.reset();
}

void EpochReporter::print_peak_memory() const {
  print("peak memory: {}", describe(peak_memory(device_), device_));
}

void EpochReporter::print_sample(Model& model) const {
  auto* gpt = dynamic_cast<Gpt*>(&model);
  if (launch_.global_rank != 0 || workload_.alphabet.empty() || gpt == nullptr || gpt->parameters().empty()) return;
  SampleSettings settings;
  settings.temperature = options_.sample_temperature;
  settings.seed = options_.seed;
  const auto lines = sample_gpt(*gpt, workload_.alphabet, settings);
  if (lines.empty())
    print("Sample: (blanks only in {} characters: the GPT has not learned enough text yet)", settings.max_characters);
  for (const auto& line : lines) print("Sample: {}", line);
}

void EpochReporter::end_training(const TensorDict& gathered) {
  write_trace();
  print_peak_memory();
  if (launch_.global_rank != 0) return;
  auto model = workload_.make_model(torch::kCPU);
  load_state_dict(*model, gathered, "the state_dict gathered on rank 0 (the wrapper's full_state_dict)");
  fmt::print("{} final weights checksum {:.17g} (gathered on rank 0)\n", tag_, weights_checksum(*model));
  if (!options_.export_weights_path.empty()) {
    export_weights(options_.export_weights_path, *model);
    fmt::print("{} Weights exported to {} (Python: torch.load; see python/README.md)\n", tag_,
               options_.export_weights_path);
  }
  if (workload_.alphabet.empty()) return;
  try {  // on the run's device: the whole model beside this rank's shards (on the CPU it is there already)
    model->to(device_);
    print_sample(*model);
  } catch (const c10::OutOfMemoryError&) {
    print("no sample: the whole model does not fit on {} beside this rank's shards", device_name(device_));
  }
}

void EpochReporter::end_training(Model& model) {
  write_trace();
  print_peak_memory();
  const double checksum = weights_checksum(model);
  fmt::print("{} final weights checksum {:.17g}\n", tag_, checksum);
  if (pg_) {
    auto root = torch::tensor({checksum}, torch::kFloat64).to(device_);
    std::vector<torch::Tensor> t{root};
    pg_->broadcast(t, 0, "final weights check");
    auto differs = torch::tensor({root.item<double>() != checksum ? 1.0 : 0.0}, torch::kFloat64).to(device_);
    pg_->allreduce_sum(differs, "final weights check");
    // In an exercise this is the likeliest half-done state (ranks on their own shards, gradients not
    // yet averaged), not a bug to report. Step 1b's model is never wrapped: its TODO averages by hand.
    const ProgramId& p = options_.program;
    if (differs.item<double>() > 0)
      throw Error("the ranks' final weights differ: the replicas went out of sync",
                  p.kind != "exercise"
                      ? "this is a bug in gradient synchronisation; rerun with NCCL_DEBUG=INFO and report it"
                  : p.step_tag() == "step1b"
                      ? "after backward(), sum every parameter's gradient over the ranks and divide it by the world "
                        "size: TODO(step1b) in " +
                            p.name + "/main.cpp"
                      : "check that the model is wrapped in DistributedDataParallel, so that backward() averages the "
                        "gradients: TODO(step1)");
  }
  // After the check, so that only weights every rank agrees on are exported.
  if (launch_.global_rank == 0 && !options_.export_weights_path.empty()) {
    export_weights(options_.export_weights_path, model);
    fmt::print("{} Weights exported to {} (Python: torch.load; see python/README.md)\n", tag_,
               options_.export_weights_path);
  }
  print_sample(model);
}

}  // namespace ddpw
