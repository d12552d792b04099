// defines: Dataset (samples held in memory), the synthetic regression workload's data,
//          DistributedSampler (each rank's shard of a per-epoch shuffle) and Loader (batches).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ddp {

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

// All samples in two tensors: inputs [N, ...] and targets [N, ...]. Inputs may be stored compactly
// (uint8 images) and are converted by `gather` when a batch is cut.
struct Dataset {
  torch::Tensor inputs;
  torch::Tensor targets;
  double input_scale = 1.0;   // multiply after converting to float (1/255 for images)
  double input_shift = 0.0;   // then subtract (normalisation mean / scale)
  double input_divide = 1.0;  // then divide (normalisation std)
  int64_t size() const { return inputs.size(0); }
  // Float inputs and targets of `indices`, on the device that holds the data and the indices.
  Batch gather(const torch::Tensor& indices) const;
  // This dataset on `device`: itself on the CPU; on a GPU a copy (inputs still compact: uint8
  // images stay uint8), made at the first call for these tensors and device and kept, so batches
  // are cut, converted and normalised there and only indices ever cross the bus.
  const Dataset& on(const torch::Device& device) const;

 private:
  mutable std::shared_ptr<const Dataset> on_device_;  // the copy kept by on()...
  mutable const void* on_device_from_ = nullptr;      // ...of these inputs
};

// 2048 samples of 20 features (PyTorch's DDP series' size), x ~ U[0,1), y = x·w + b + 0.01·noise with a
// fixed w and b: a target the model can learn, so the loss falls (upstream's one-output
// cross-entropy is always 0). Same data for the same seed on every rank and every run.
Dataset make_synthetic_dataset(int64_t samples = 2048, int64_t features = 20, uint64_t seed = 0);

// Like torch.utils.data.DistributedSampler: a shuffle that depends only on (seed, epoch), padded
// to a multiple of num_replicas, then every num_replicas-th index from `rank`. All ranks get the
// same number of samples, disjoint within one epoch. With num_replicas = 1 it is a plain shuffle.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas = 1, int rank = 0, uint64_t seed = 0, bool shuffle = true);
  void set_epoch(int64_t epoch);  // a new order for this epoch; call it before every epoch
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }
  const torch::Tensor& indices() const { return indices_; }  // int64, this rank's order

 private:
  int64_t dataset_size_, num_samples_, epoch_ = -1;
  int num_replicas_, rank_;
  uint64_t seed_;
  bool shuffle_;
  torch::Tensor indices_;
};

// Cuts a sampler's order into batches on a device. Step k is addressable directly, so a run
// resumed mid-epoch continues exactly where the snapshot was taken. On a GPU the dataset lives on
// the device (Dataset::on) and each epoch's order is copied there once, from pinned memory without
// blocking; a batch is then gathered, converted and normalised by kernels, with no host copy.
class Loader {
 public:
  Loader(const Dataset& data, const DistributedSampler& sampler, int64_t batch_size, torch::Device device);
  int64_t steps() const;            // batches per epoch on this rank (the last may be short)
  Batch batch(int64_t step) const;  // on the device
  int64_t batch_size() const { return batch_size_; }
  // At most `steps` batches per epoch from now on (0: all of them): short runs, as PyTorch
  // Lightning's limit_train_batches. The epoch then ends early; the sampler's order is unchanged.
  void limit_steps(int64_t steps);
  // Seconds spent in batch() (gather, convert, copy to the device) since the last call; restarts
  // the count. The epoch report shows it, so a data-bound run is visible. (On a GPU: the time to
  // issue the kernels, which run asynchronously.)
  double take_load_seconds();

 private:
  const torch::Tensor& order() const;  // the sampler's indices, on the device

  const Dataset& data_;  // on the device
  const DistributedSampler& sampler_;
  int64_t batch_size_;
  int64_t step_limit_ = 0;  // limit_steps; 0: none
  torch::Device device_;
  mutable torch::Tensor order_on_device_;  // a GPU's copy of the sampler's indices...
  mutable int64_t order_epoch_ = -1;       // ...for this epoch
  mutable double load_seconds_ = 0;        // bookkeeping only: batch() stays const (steps are addressable)
};

}  // namespace ddp
