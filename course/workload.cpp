#include "course/workload.h"

#include <cmath>

#include "course/from_options.h"
#include "course/idx.h"
#include "course/text.h"
#include "ddp/adadelta.h"
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "ddp/sgd.h"
#include "ddp/weights_io.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

// Seeded weights, or --init-weights (a state_dict from Python) over them; --precision's autocast.
template <typename M, typename... Args>
std::function<std::shared_ptr<Model>(torch::Device)> seeded_model(uint64_t seed, std::string init_weights,
                                                                  MixedPrecision amp, Args... args) {
  return [=](torch::Device device) mutable -> std::shared_ptr<Model> {
    torch::manual_seed(seed);
    auto model = std::make_shared<M>(args...);
    model->to(device);
    if (!init_weights.empty()) {
      try {
        import_weights(init_weights, *model);
      } catch (const WeightsMismatchError& e) {
        // The library cannot know which Python module is the twin: the course's are in models.py.
        throw Error(e.message(),
                    "save the state_dict of the twin module of python/ddpw/models.py that matches --dataset "
                    "(LinearRegressor: synthetic; MnistCnn: mnist, fashion-mnist, synthetic-images), in float32; "
                    "the GPT has no Python twin there");
      }
    }
    amp.apply_to(*model);
    return model;
  };
}

MixedPrecision mixed_precision(const Options& o) { return MixedPrecision(o.precision, grad_scaler_options(o)); }

Workload synthetic(const Options& o) {
  Workload w;
  w.name = "synthetic";
  w.train = make_synthetic_dataset(2048, 20, o.seed);
  w.test = make_synthetic_dataset(512, 20, o.seed + 1000);  // same map, other samples
  const MixedPrecision amp = mixed_precision(o);
  w.precision = o.precision;
  w.make_model = seeded_model<LinearRegressor>(o.seed, o.init_weights_path, amp, int64_t{20});
  const double lr = base_learning_rate(o);
  w.make_optimizer = [lr](Model& m) {  // torch::optim::SGD, with multi-tensor kernels on a GPU
    auto optimizer = std::make_unique<Sgd>(m.parameters(), torch::optim::SGDOptions(lr));
    attach_grad_scaler(*optimizer, m);
    return optimizer;
  };
  w.loss = amp.wrap([](const torch::Tensor& out, const torch::Tensor& target) { return torch::mse_loss(out, target); });
  w.learning_rate = [lr](int64_t) { return lr; };
  return w;
}

// --dataset synthetic-images: generated 28x28 images for the CNN, no download (step 4 shows its
// 1.2 M parameters' optimizer state with it). An image's class is which of 10 fixed random patterns
// it matches best; the patterns are the same for the training and the test images.
Dataset synthetic_images(int64_t samples, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto pattern_gen = at::detail::createCPUGenerator(seed + 2000);
  const auto patterns = torch::randn({28 * 28, 10}, pattern_gen);
  Dataset d;
  d.inputs = torch::randn({samples, 1, 28, 28}, gen);
  d.targets = torch::matmul(d.inputs.reshape({samples, 28 * 28}), patterns).argmax(1);
  return d;
}

Workload images(const Options& o) {
  Workload w;
  w.name = o.dataset;
  if (o.dataset == "synthetic-images") {
    w.train = synthetic_images(512, o.seed);
    w.test = synthetic_images(128, o.seed + 1000);
  } else {
    const bool fashion = o.dataset == "fashion-mnist";
    const std::string dir = data_folder(o);
    // Per-dataset normalisation (mean, std of the training images), as the seeds' transforms do.
    const double mean = fashion ? 0.2860 : 0.1307, std = fashion ? 0.3530 : 0.3081;
    w.train = load_idx_dataset(dir, Split::kTrain, mean, std);
    w.test = load_idx_dataset(dir, Split::kTest, mean, std);
  }
  w.classification = true;
  const MixedPrecision amp = mixed_precision(o);
  w.precision = o.precision;
  w.make_model = seeded_model<MnistCnn>(o.seed, o.init_weights_path, amp);
  const double lr = base_learning_rate(o), gamma = o.gamma;
  w.make_optimizer = [lr](Model& m) {
    auto optimizer = std::make_unique<Adadelta>(m.parameters(), lr);
    attach_grad_scaler(*optimizer, m);
    return optimizer;
  };
  w.loss = amp.wrap([](const torch::Tensor& out, const torch::Tensor& target) { return torch::nll_loss(out, target); });
  w.learning_rate = [lr, gamma](int64_t epoch) { return lr * std::pow(gamma, static_cast<double>(epoch)); };
  return w;
}

// --model gpt: the text's first 90 % gives the training windows, the rest the validation windows
// (nanoGPT's split); an epoch is kGptTrainWindows windows drawn once from --seed, so a CPU epoch of
// the tiny GPT takes seconds whatever the text's length. AdamW, as nanoGPT; next-character cross-entropy.
constexpr int64_t kGptTrainWindows = 1024, kGptValidationWindows = 256;

Workload gpt(const Options& o) {
  Workload w;
  w.name = o.dataset;
  const Text text = load_text(data_folder(o));
  w.alphabet = text.alphabet;
  const GptConfig config = gpt_config(o.gpt_size, static_cast<int64_t>(text.alphabet.size()));
  const auto length = static_cast<int64_t>(text.ids.size()), split = length * 9 / 10;
  w.train = char_windows(text, 0, split, kGptTrainWindows, config.context, o.seed);
  w.test = char_windows(text, split, length, kGptValidationWindows, config.context, o.seed + 1000);
  const MixedPrecision amp = mixed_precision(o);
  w.precision = o.precision;
  w.make_model = seeded_model<Gpt>(o.seed, o.init_weights_path, amp, config);
  const double lr = base_learning_rate(o);
  w.make_optimizer = [lr](Model& m) -> std::unique_ptr<torch::optim::Optimizer> {
    DDP_CHECK(!m.grad_scaler(),
              "--precision fp16 needs an optimizer that takes a GradScaler; the GPT's AdamW "
              "(LibTorch's) does not",
              "use --precision bf16 (no loss scaling), or fp16 with ZeRO's ShardedAdamW");
    // No weight decay: the same AdamW as the ZeRO and FSDP programs' (adam_options' defaults, zero_settings.h).
    return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(lr).weight_decay(0));
  };
  const int64_t vocab = config.vocab;
  w.loss = amp.wrap([vocab](const torch::Tensor& logits, const torch::Tensor& target) {
    return torch::cross_entropy_loss(logits.reshape({-1, vocab}), target.reshape({-1}));
  });
  w.learning_rate = [lr](int64_t) { return lr; };
  return w;
}

}  // namespace

MixedPrecision::MixedPrecision(std::string precision, GradScalerOptions scaler_options)
    : precision_(std::move(precision)), scaler_options_(scaler_options) {
  DDP_CHECK(precision_ == "fp32" || precision_ == "bf16" || precision_ == "fp16",
            "precision '" + precision_ + "' is not one of fp32, bf16, fp16", "use --precision fp32, bf16 or fp16");
}

void MixedPrecision::apply_to(Model& model) {
  if (precision_ == "fp32") return;
  const torch::Device device = model.parameters().at(0).device();
  *autocast_ = AutocastOptions{.device_type = device.type(), .dtype = autocast_dtype(precision_)};
  if (precision_ == "fp16" && !*scaler_) *scaler_ = std::make_shared<GradScaler>(device, scaler_options_);
  model.set_mixed_precision(*autocast_, *scaler_);
}

std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> MixedPrecision::wrap(
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss) const {
  if (precision_ == "fp32") return loss;
  return [loss = std::move(loss), autocast = autocast_, scaler = scaler_](const torch::Tensor& out,
                                                                          const torch::Tensor& target) {
    std::optional<Autocast> amp;
    if (*autocast) amp.emplace(**autocast);
    torch::Tensor value = loss(out, target);
    // backward() of the loss starts from d(loss)/d(loss) = 1: the hook makes it the scale, so every
    // gradient below is scaled (PyTorch's scaler.scale(loss).backward()), while the loss's value,
    // which the programs log, is not.
    if (*scaler && value.requires_grad())
      value.register_hook([s = *scaler](const torch::Tensor& grad) { return s->scale(grad); });
    return value;
  };
}

void attach_grad_scaler(torch::optim::Optimizer& optimizer, const Model& model) {
  if (!model.grad_scaler()) return;
  auto* amp = dynamic_cast<SupportsAmpScaling*>(&optimizer);
  DDP_CHECK(amp, "fp16 needs an optimizer that takes a GradScaler",
            "use one of the library's optimizers (ddp::Sgd, ddp::Adadelta, ddp::ShardedAdamW)");
  amp->set_grad_scaler(model.grad_scaler());
}

std::string data_folder(const Options& options) {
  if (!options.data_dir.empty()) return options.data_dir;
  if (options.dataset == "fortunes") return kFortunesFolder;
  return options.dataset == "fashion-mnist" ? "/usr/share/datasets/fashion-mnist" : "data/mnist";
}

double base_learning_rate(const Options& options) {
  if (options.lr > 0) return options.lr;
  if (options.dataset == "fortunes") return 1e-3;  // AdamW, as nanoGPT's character model
  return options.dataset == "synthetic" ? 1e-2 : 1.0;
}

Workload make_workload(const Options& options) {
  if (options.dataset == "synthetic") return synthetic(options);
  if (options.dataset == "fortunes") return gpt(options);
  return images(options);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

EvalResult evaluate(Model& model, const Workload& workload, int64_t batch_size, torch::Device device, ProcessGroup* pg,
                    int rank, int world_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  // On a GPU the test set stays there (Dataset::on) and the sums stay on the device until the
  // end: one read per evaluation, not a blocking copy and two reads per batch.
  const Dataset& test = workload.test.on(device);
  const auto on_device = torch::TensorOptions().device(test.inputs.device());
  // Every rank takes every world_size-th test sample (no padding: each sample counts once).
  const auto shard = torch::arange(rank, workload.test.size(), world_size, on_device.dtype(torch::kInt64));
  // Sum of (mean batch loss x batch size) in float64 and the count of correct answers: the same
  // operations, in the same order, as summing the batches' values on the host.
  auto loss_sum = torch::zeros({}, on_device.dtype(torch::kFloat64));
  auto correct = torch::zeros({}, on_device.dtype(torch::kInt64));
  for (int64_t start = 0; start < shard.size(0); start += batch_size) {
    const auto idx = shard.narrow(0, start, std::min(batch_size, shard.size(0) - start));
    const Batch b = test.gather(idx);
    const auto out = model.forward(b.input);
    loss_sum.add_(workload.loss(out, b.target).to(torch::kFloat64).mul_(static_cast<double>(idx.size(0))));
    if (workload.classification) correct.add_(out.argmax(1).eq(b.target).sum());
  }
  model.train();
  auto totals = torch::stack({loss_sum, correct.to(torch::kFloat64),
                              torch::full({}, static_cast<double>(shard.size(0)), on_device.dtype(torch::kFloat64))});
  if (pg) pg->allreduce_sum(totals, "evaluation (sum of test loss and accuracy over ranks)");
  totals = totals.cpu();  // the one read
  const auto* t = totals.data_ptr<double>();
  EvalResult r;
  r.samples = static_cast<int64_t>(t[2]);
  const double samples = std::max<double>(1.0, static_cast<double>(r.samples));
  r.loss = t[0] / samples;
  r.accuracy = workload.classification ? t[1] / samples : 0.0;
  return r;
}

}  // namespace ddpw
