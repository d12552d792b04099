// defines: Workload — what a step trains, chosen by --dataset: data, model, optimizer, loss and
//          the learning rate per epoch — and evaluate (loss and accuracy over all ranks' shards).
//          --precision bf16|fp16 lives here too, so that the step programs train in mixed precision
//          unchanged: the model's forward and the loss run under autocast (ddp::Autocast), and for
//          fp16 the loss registers a hook that scales its gradient by the model's GradScaler (the
//          loss itself, which the programs print, stays unscaled), and the optimizer has that scaler
//          attached, so its step() unscales, skips on inf/NaN and updates the scale (grad_scaler.h).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "course/models.h"
#include "course/options.h"
#include "ddp/autocast.h"
#include "ddp/data.h"
#include "ddp/grad_scaler.h"

namespace ddp {
class ProcessGroup;
}  // namespace ddp

namespace ddpw {

struct Workload {
  std::string name;  // "synthetic", "mnist", "fashion-mnist", "synthetic-images" or "fortunes"
  ddp::Dataset train, test;
  bool classification = false;  // accuracy is reported for classifiers
  // The model, initialised from --seed (the same on every rank), then from --init-weights when
  // given, and moved to `device`.
  std::function<std::shared_ptr<Model>(torch::Device device)> make_model;
  std::function<std::unique_ptr<torch::optim::Optimizer>(Model&)> make_optimizer;
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  std::function<double(int64_t epoch)> learning_rate;  // the schedule (StepLR for the CNN)
  std::string precision = "fp32";                      // --precision: fp32 | bf16 | fp16
  std::string alphabet;  // a text (--model gpt): id -> character, the GPT's vocabulary; else empty
};

// What --precision gives any model and loss (make_workload uses it; the benchmark's workloads too):
// make_model calls apply_to(model), make_optimizer attach_grad_scaler, and the loss is wrap(loss).
class MixedPrecision {
 public:
  MixedPrecision(std::string precision, ddp::GradScalerOptions scaler_options);
  // Autocast on the model's device type; for fp16 the GradScaler too (one per workload, on the first
  // model's device). Nothing for fp32.
  void apply_to(Model& model);
  // The loss under the same autocast, its gradient scaled (fp16, in training: the loss requires grad).
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> wrap(
      std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss) const;

 private:
  std::string precision_;
  ddp::GradScalerOptions scaler_options_;
  std::shared_ptr<std::optional<ddp::AutocastOptions>> autocast_ =
      std::make_shared<std::optional<ddp::AutocastOptions>>();
  std::shared_ptr<std::shared_ptr<ddp::GradScaler>> scaler_ = std::make_shared<std::shared_ptr<ddp::GradScaler>>();
};

// synthetic: 2048 samples, Linear(20,1), SGD, MSE. mnist/fashion-mnist: the IDX files in
// --data-dir (default ./data/mnist, /usr/share/datasets/fashion-mnist), the CNN, Adadelta, NLL.
// synthetic-images: 512 generated 28x28 images in 10 classes (128 to test), the same CNN.
// fortunes (--model gpt): windows of a plain English text (Debian's fortune files, or the text file
// in --data-dir), the GPT of --gpt-size, AdamW, next-character cross-entropy.
Workload make_workload(const Options& options);

// Where the images are read from: --data-dir, else the dataset's usual folder.
std::string data_folder(const Options& options);

// The learning rate of the first epoch: --lr, else the workload's default (SGD 1e-2 synthetic,
// Adadelta 1.0 CNN, AdamW 1e-3 GPT).
double base_learning_rate(const Options& options);

// The model's GradScaler (fp16), if any, attached to `optimizer` (one of the library's: Sgd, Adadelta),
// whose step() then unscales, skips on inf/NaN and updates the scale.
void attach_grad_scaler(torch::optim::Optimizer& optimizer, const Model& model);

// Sets every parameter group's learning rate.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

struct EvalResult {
  double loss = 0;      // mean over all test samples of all ranks
  double accuracy = 0;  // fraction correct (classifiers), else 0
  int64_t samples = 0;
};

// Evaluates on this rank's shard of the test set and sums over the ranks (pg may be null).
EvalResult evaluate(Model& model, const Workload& workload, int64_t batch_size, torch::Device device,
                    ddp::ProcessGroup* pg, int rank, int world_size);

}  // namespace ddpw
