// defines: Model (the interface every course model has: forward(x), under autocast when the run is
//          mixed precision), the linear regressor of the synthetic workload, the MNIST CNN of the
//          Della / pytorch examples seed, and Gpt (a character-level decoder-only transformer, as
//          minGPT / nanoGPT: the workload of --model gpt).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/autocast.h"
#include "ddp/grad_scaler.h"

namespace ddpw {

class Model : public torch::nn::Module {
 public:
  // The layers (compute), inside a ddp::Autocast when mixed precision is set: the step programs'
  // model_->forward(x) runs in bf16/fp16 without a line of their own.
  torch::Tensor forward(const torch::Tensor& x);

  // --precision (make_workload sets it): autocast around forward(), none for fp32; for fp16 also the
  // GradScaler that scales this model's loss (workload.h), which the workload's optimizers attach
  // and ZeRO's optimizer takes from the model (grad_scaler(), sharded_adamw.h).
  void set_mixed_precision(std::optional<ddp::AutocastOptions> autocast, std::shared_ptr<ddp::GradScaler> scaler);
  const std::optional<ddp::AutocastOptions>& autocast() const { return autocast_; }
  const std::shared_ptr<ddp::GradScaler>& grad_scaler() const { return scaler_; }
  // The submodules that a sharded wrapper may gather one at a time (ddp/fully_sharded.h's units):
  // the GPT's transformer blocks; none for the small models (they are one unit).
  virtual std::vector<std::shared_ptr<torch::nn::Module>> blocks() const { return {}; }

 protected:
  virtual torch::Tensor compute(const torch::Tensor& x) = 0;

 private:
  std::optional<ddp::AutocastOptions> autocast_;
  std::shared_ptr<ddp::GradScaler> scaler_;
};

// Linear(features, 1): the tutorial's model.
class LinearRegressor : public Model {
 public:
  explicit LinearRegressor(int64_t features = 20);

 protected:
  torch::Tensor compute(const torch::Tensor& x) override;

 private:
  torch::nn::Linear fc{nullptr};
};

// conv(1->32, 3) -> relu -> conv(32->64, 3) -> relu -> maxpool 2 -> dropout 0.25 -> fc 9216->128 ->
// relu -> dropout 0.5 -> fc 128->10 -> log_softmax. Input [N, 1, 28, 28].
class MnistCnn : public Model {
 public:
  MnistCnn();

 protected:
  torch::Tensor compute(const torch::Tensor& x) override;

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Dropout dropout1{nullptr}, dropout2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// The GPT's sizes. --gpt-size picks one of gpt_config's presets.
struct GptConfig {
  int64_t vocab = 256;   // distinct characters (bytes) of the text
  int64_t context = 64;  // characters a window holds (block_size in nanoGPT)
  int64_t layers = 2, width = 64, heads = 4;
};

// tiny (CPU, the tests: 2 layers, width 64, 4 heads, context 64), small (6, 384, 6, 256: nanoGPT's
// shakespeare_char), medium (12, 768, 12, 512: GPT-2 small's shape), large (24, 1024, 16, 512:
// GPT-2 medium's) and xl (48, 1600, 25, 1024: GPT-2 XL's). Throws naming the sizes otherwise.
GptConfig gpt_config(const std::string& size, int64_t vocab);

// One transformer block (pre-LayerNorm): x + attn(ln1(x)), then x + mlp(ln2(x)). Causal
// self-attention through scaled_dot_product_attention; the MLP is 4x wide with GELU. No dropout:
// runs of one seed are equal on any number of ranks.
class GptBlock : public torch::nn::Module {
 public:
  GptBlock(int64_t width, int64_t heads, int64_t layers);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, width] -> [B, T, width]

 private:
  int64_t heads_;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc_proj{nullptr};
};

// Token + position embeddings, `layers` blocks, a final LayerNorm and the head, tied to the token
// embedding (its weight is wte's). Input [B, T] character ids (as float: ddp::Dataset's batches are
// float), output [B, T, vocab] logits. Initialised as nanoGPT: N(0, 0.02), the residual projections
// N(0, 0.02/sqrt(2 layers)), zero biases.
class Gpt : public Model {
 public:
  explicit Gpt(GptConfig config);
  const GptConfig& config() const { return config_; }
  // The transformer blocks, in order; compute() calls each through ddp::call (module_call.h).
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() const override { return {blocks_.begin(), blocks_.end()}; }

 protected:
  torch::Tensor compute(const torch::Tensor& x) override;

 private:
  GptConfig config_;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  torch::nn::LayerNorm ln_f{nullptr};
};

}  // namespace ddpw
