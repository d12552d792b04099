// The course's models. Submodule names (fc, conv1, ...) are the keys in snapshots: keep them.
#include "course/models.h"

#include <cmath>

#include "ddp/error.h"
#include "ddp/module_call.h"

namespace ddpw {

torch::Tensor Model::forward(const torch::Tensor& x) {
  if (!autocast_) return compute(x);
  ddp::Autocast amp(*autocast_);
  return compute(x);
}

void Model::set_mixed_precision(std::optional<ddp::AutocastOptions> autocast, std::shared_ptr<ddp::GradScaler> scaler) {
  autocast_ = autocast;
  scaler_ = std::move(scaler);
}

LinearRegressor::LinearRegressor(int64_t features) { fc = register_module("fc", torch::nn::Linear(features, 1)); }

torch::Tensor LinearRegressor::compute(const torch::Tensor& x) { return fc->forward(x); }

// pytorch/examples mnist/main.py `Net`, layer for layer.
MnistCnn::MnistCnn() {
  conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).stride(1)));
  conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(1)));
  dropout1 = register_module("dropout1", torch::nn::Dropout(0.25));
  dropout2 = register_module("dropout2", torch::nn::Dropout(0.5));
  fc1 = register_module("fc1", torch::nn::Linear(9216, 128));  // 64 channels x 12 x 12
  fc2 = register_module("fc2", torch::nn::Linear(128, 10));
}

torch::Tensor MnistCnn::compute(const torch::Tensor& x) {
  auto h = torch::relu(conv1->forward(x));  // [N, 32, 26, 26]
  h = torch::relu(conv2->forward(h));       // [N, 64, 24, 24]
  h = torch::max_pool2d(h, 2);              // [N, 64, 12, 12]
  h = dropout1->forward(h);
  h = torch::flatten(h, 1);  // [N, 9216]
  h = dropout2->forward(torch::relu(fc1->forward(h)));
  return torch::log_softmax(fc2->forward(h), 1);  // [N, 10]
}

GptConfig gpt_config(const std::string& size, int64_t vocab) {
  GptConfig c;
  c.vocab = vocab;
  if (size == "tiny") return c;
  if (size == "small")
    c.context = 256, c.layers = 6, c.width = 384, c.heads = 6;
  else if (size == "medium")
    c.context = 512, c.layers = 12, c.width = 768, c.heads = 12;
  else if (size == "large")
    c.context = 512, c.layers = 24, c.width = 1024, c.heads = 16;
  else if (size == "xl")
    c.context = 1024, c.layers = 48, c.width = 1600, c.heads = 25;
  else
    throw ddp::Error("GPT size '" + size + "' is not one of tiny, small, medium, large, xl", "use --gpt-size tiny");
  return c;
}

namespace {
torch::nn::Linear linear(int64_t in, int64_t out, double std) {
  torch::nn::Linear l(in, out);
  torch::NoGradGuard no_grad;
  l->weight.normal_(0.0, std);
  l->bias.zero_();
  return l;
}
}  // namespace

GptBlock::GptBlock(int64_t width, int64_t heads, int64_t layers) : heads_(heads) {
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  qkv = register_module("qkv", linear(width, 3 * width, 0.02));
  proj = register_module("proj", linear(width, width, residual_std));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  fc = register_module("fc", linear(width, 4 * width, 0.02));
  fc_proj = register_module("fc_proj", linear(4 * width, width, residual_std));
}

torch::Tensor GptBlock::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), time = x.size(1), width = x.size(2);
  // [B, T, 3 width] -> q, k, v as [B, heads, T, width / heads]
  auto qkv_heads =
      qkv->forward(ln1->forward(x)).view({batch, time, 3, heads_, width / heads_}).permute({2, 0, 3, 1, 4});
  auto attended = at::scaled_dot_product_attention(qkv_heads[0], qkv_heads[1], qkv_heads[2], /*attn_mask=*/{},
                                                   /*dropout_p=*/0.0, /*is_causal=*/true);
  auto h = x + proj->forward(attended.transpose(1, 2).reshape({batch, time, width}));
  return h + fc_proj->forward(torch::gelu(fc->forward(ln2->forward(h))));
}

Gpt::Gpt(GptConfig config) : config_(config) {
  DDP_CHECK(config.width % config.heads == 0,
            "the GPT's width " + std::to_string(config.width) + " is not a multiple of its heads " +
                std::to_string(config.heads),
            "choose a width that the heads divide");
  wte = register_module("wte", torch::nn::Embedding(config.vocab, config.width));
  wpe = register_module("wpe", torch::nn::Embedding(config.context, config.width));
  {
    torch::NoGradGuard no_grad;
    wte->weight.normal_(0.0, 0.02);
    wpe->weight.normal_(0.0, 0.02);
  }
  auto list = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.layers; ++i) {
    blocks_.push_back(std::make_shared<GptBlock>(config.width, config.heads, config.layers));
    list->push_back(blocks_.back());
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.width})));
}

torch::Tensor Gpt::compute(const torch::Tensor& x) {
  const int64_t time = x.size(1);
  DDP_CHECK(time <= config_.context,
            "a window of " + std::to_string(time) + " characters is longer than the GPT's context of " +
                std::to_string(config_.context),
            "cut the text into windows of at most the context");
  const auto ids = x.to(torch::kLong);  // the batches arrive as float (ddp::Dataset::gather); ids < 2^24 are exact
  auto h = wte->forward(ids) + wpe->forward(torch::arange(time, ids.options()));
  // Through the call site a sharded wrapper sees (a plain forward without one): it gathers a
  // block's parameters just before it runs, and may recompute it in backward.
  for (const auto& block : blocks_) h = ddp::call(block, h);
  return torch::matmul(ln_f->forward(h), wte->weight.t());  // the head, tied to the token embedding
}

}  // namespace ddpw
