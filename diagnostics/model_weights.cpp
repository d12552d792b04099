// model_weights — a model's weights without training: where they come from (the seeded model, a
// training snapshot, or a state_dict saved by Python), what they give (the first training batch's
// loss, the test loss and accuracy, the weights checksum every step prints at its end) and, with
// --export-weights, the file Python's torch.load reads. python/evaluate.py prints the same
// figures from Python with the same digits, so the two sides can be compared line by line.
//
//   build/bin/model_weights --dataset fashion-mnist --snapshot snapshot.pt --export-weights model.pt
//   build/bin/model_weights --dataset fashion-mnist --init-weights pretrained.pt
#include <torch/torch.h>

#include <CLI/CLI.hpp>  // defines: CLI::App (this program's options)
#include <cstdio>
#include <string>

#include "course/compute.h"       // defines: configure_compute (threads)
#include "course/epoch_report.h"  // defines: EpochReporter (checksum, --export-weights)
#include "course/options.h"       // defines: Options, parse_options
#include "course/run_main.h"      // defines: run_main
#include "course/workload.h"      // defines: make_workload (model, --init-weights), evaluate
#include "ddp/config.h"           // defines: DDPW_HAVE_*, DDPW_TORCH_VERSION
#include "ddp/data.h"             // defines: DistributedSampler, Loader (the first training batch)
#include "ddp/device.h"           // defines: choose_device
#include "ddp/snapshot.h"         // defines: load_model_weights

namespace {

void add_options(CLI::App& app, ddpw::Options& o, CLI::Option*& batch_size) {
  o.snapshot_path.clear();  // no snapshot unless named
  app.add_option("--dataset", o.dataset, "Workload: picks the model and the data")
      ->check(CLI::IsMember({"synthetic", "mnist", "fashion-mnist"}));
  app.add_option("--data-dir", o.data_dir, "Folder with the four IDX files (.gz or not)");
  auto* snapshot = app.add_option("--snapshot", o.snapshot_path, "Take the weights of this training snapshot")
                       ->check(CLI::ExistingFile);
  app.add_option("--init-weights", o.init_weights_path, "Take the weights of a state_dict saved by torch.save")
      ->check(CLI::ExistingFile)
      ->excludes(snapshot);
  app.add_option("--export-weights", o.export_weights_path, "Write the weights here for Python's torch.load");
  app.add_option("--seed", o.seed, "Seed of the initial weights and of the sampler (the first batch)");
  batch_size = app.add_option("--batch-size", o.batch_size, "Samples in the first batch (default: as the steps)")
                   ->check(CLI::Range(1, 1 << 20));
  app.add_option("--test-batch-size", o.test_batch_size, "Samples per evaluation step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", o.threads, "Intra-op threads (0: all cores)")->check(CLI::Range(0, 1024));
  app.add_option("--device", o.device, "auto (CUDA if available, else CPU), cpu, cuda or cuda:N");
}

// The loss of the first batch a step would train on (epoch 0, step 0, one rank), dropout off so
// that it depends on the weights and the data alone.
double first_batch_loss(ddpw::Model& model, const ddpw::Workload& workload, const ddpw::Options& opt,
                        torch::Device device, int64_t& samples) {
  const ddp::DistributedSampler sampler(workload.train.size(), /*num_replicas=*/1, /*rank=*/0, opt.seed);
  const ddp::Loader loader(workload.train, sampler, opt.batch_size, device);
  const ddp::Batch batch = loader.batch(0);
  samples = batch.input.size(0);
  torch::NoGradGuard no_grad;
  model.eval();
  const double loss = workload.loss(model.forward(batch.input), batch.target).item<double>();
  model.train();
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::Option* batch_size = nullptr;
  ddpw::Options opt = ddpw::parse_options(
      argc, argv, "model_weights: a model's weights, their figures, and the file Python's torch.load reads",
      /*groups=*/0, [&](CLI::App& app, ddpw::Options& o) { add_options(app, o, batch_size); });
  if (batch_size->count() == 0 && opt.dataset != "synthetic") opt.batch_size = ddpw::kCnnBatchSize;
  return ddpw::run_main([&] {
    const torch::Device device = ddp::choose_device(opt.device, /*local_rank=*/0);
    const ddp::LaunchEnv one_process;  // rank 0 of 1
    ddpw::configure_compute(opt, one_process);
    const ddpw::Workload workload = ddpw::make_workload(opt);
    auto model = workload.make_model(device);  // seeded, or --init-weights
    std::string source = "the seeded initial model (--seed " + std::to_string(opt.seed) + ")";
    if (!opt.init_weights_path.empty()) source = "state_dict " + opt.init_weights_path;
    if (!opt.snapshot_path.empty()) {
      ddp::load_model_weights(opt.snapshot_path, *model);
      source = "training snapshot " + opt.snapshot_path;
    }
    int64_t parameters = 0;
    for (const auto& p : model->parameters()) parameters += p.numel();
    std::printf("# model_weights: %s, %s (%lld parameters), weights from %s, LibTorch %s\n", workload.name.c_str(),
                model->name().c_str(), static_cast<long long>(parameters), source.c_str(), DDPW_TORCH_VERSION);
    std::printf("%-16s %-18s %s\n", "tensor", "shape", "dtype");
    for (const auto& p : model->named_parameters())
      std::printf("%-16s %-18s %s\n", p.key().c_str(), c10::str(p.value().sizes()).c_str(),
                  c10::toString(p.value().scalar_type()));

    // %.17g: every digit of a double, so that Python's figures can be compared exactly.
    int64_t samples = 0;
    const double loss = first_batch_loss(*model, workload, opt, device, samples);
    std::printf("first batch loss %.17g (epoch 0, step 0: %lld samples, seed %llu, dropout off)\n", loss,
                static_cast<long long>(samples), static_cast<unsigned long long>(opt.seed));
    const ddpw::EvalResult test = ddpw::evaluate(*model, workload, opt.test_batch_size, device, /*pg=*/nullptr, 0, 1);
    if (workload.classification)
      std::printf("test loss %.17g | test accuracy %.17g (%lld of %lld)\n", test.loss, test.accuracy,
                  static_cast<long long>(std::llround(test.accuracy * static_cast<double>(test.samples))),
                  static_cast<long long>(test.samples));
    else
      std::printf("test loss %.17g (%lld samples)\n", test.loss, static_cast<long long>(test.samples));
    std::fflush(stdout);
    // What a step does at its end: the weights checksum and, with --export-weights, the export.
    ddpw::EpochReporter reporter(opt, one_process, device, workload, /*pg=*/nullptr);
    reporter.end_training(*model);
    return ddp::kExitOk;
  });
}
