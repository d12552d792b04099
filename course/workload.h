// defines: Workload — what a step trains, chosen by --dataset: data, model, optimizer, loss and
//          the learning rate per epoch — and evaluate (loss and accuracy over all ranks' shards).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "course/models.h"
#include "course/options.h"
#include "ddp/data.h"

namespace ddp {
class ProcessGroup;
}  // namespace ddp

namespace ddpw {

struct Workload {
  std::string name;  // "synthetic", "mnist" or "fashion-mnist"
  ddp::Dataset train, test;
  bool classification = false;  // accuracy is reported for classifiers
  // The model, initialised from --seed (the same on every rank), then from --init-weights when
  // given, and moved to `device`.
  std::function<std::shared_ptr<Model>(torch::Device device)> make_model;
  std::function<std::unique_ptr<torch::optim::Optimizer>(Model&)> make_optimizer;
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  std::function<double(int64_t epoch)> learning_rate;  // the schedule (StepLR for the CNN)
};

// synthetic: 2048 samples, Linear(20,1), SGD, MSE. mnist/fashion-mnist: the IDX files in
// --data-dir (default ./data/mnist, /usr/share/datasets/fashion-mnist), the CNN, Adadelta, NLL.
Workload make_workload(const Options& options);

// Where the images are read from: --data-dir, else the dataset's usual folder.
std::string data_folder(const Options& options);

// The learning rate of the first epoch: --lr, else the workload's default (SGD 1e-2 synthetic,
// Adadelta 1.0 CNN).
double base_learning_rate(const Options& options);

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
