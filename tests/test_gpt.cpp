// The GPT workload (--model gpt): the model's shape (tied head, causal attention), the text's
// windows (targets shifted by one, the train/validation split), the refusals of a missing text,
// DDP on 2 ranks equal to one process training on the whole batch, its loss falling, and the lines
// it writes at the end of training (gpt_sample.h). The text is the project's README.md, so the test
// needs no package.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "course/gpt_sample.h"
#include "course/models.h"
#include "course/options.h"
#include "course/text.h"
#include "course/workload.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/files.h"
#include "multiprocess.h"

namespace gpt_tests {

const std::string kText = std::string(DDPW_TEST_DATA_DIR) + "/../../README.md";

TEST(Gpt, HeadIsTiedAttentionIsCausalAndWindowsAreTheTextShiftedByOne) {
  torch::manual_seed(0);
  ddpw::Gpt model(ddpw::gpt_config("tiny", 50));
  std::vector<std::string> names;
  int64_t count = 0;
  for (const auto& p : model.named_parameters()) names.push_back(p.key()), count += p.value().numel();
  EXPECT_EQ(names.front(), "wte.weight");
  EXPECT_EQ(names.at(2), "blocks.0.ln1.weight");
  EXPECT_EQ(names.back(), "ln_f.bias");  // no head of its own: it is wte's weight
  // 50x64 + 64x64 embeddings, 2 blocks of 12 x 64^2 weights + 13 x 64 biases and norms, the final norm
  EXPECT_EQ(count, 50 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
  EXPECT_EQ(model.blocks().size(), 2u);
  model.eval();
  auto x = torch::randint(0, 50, {2, 16}).to(torch::kFloat32);
  const auto out = model.forward(x);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 16, 50}));
  auto changed = x.clone();
  changed.select(1, 10).fill_(7);  // a later character cannot change the logits before it
  const auto out2 = model.forward(changed);
  EXPECT_TRUE(torch::allclose(out.narrow(1, 0, 10), out2.narrow(1, 0, 10)));
  EXPECT_FALSE(torch::allclose(out.narrow(1, 10, 6), out2.narrow(1, 10, 6)));
  EXPECT_THROW(ddpw::gpt_config("huge", 50), ddp::Error);

  // The text's windows (in the same test: one process start fewer).
  const ddpw::Text text = ddpw::load_text(kText);
  ASSERT_GT(text.ids.size(), 4000u);
  EXPECT_LT(text.alphabet.size(), 200u);  // bytes: the vocabulary holds only those the text has
  const int64_t split = static_cast<int64_t>(text.ids.size()) * 9 / 10;
  const auto d = ddpw::char_windows(text, split, static_cast<int64_t>(text.ids.size()), 8, 32, 3);
  ASSERT_EQ(d.inputs.sizes(), (std::vector<int64_t>{8, 32}));
  EXPECT_TRUE(torch::equal(d.inputs.narrow(1, 1, 31).to(torch::kInt64), d.targets.narrow(1, 0, 31)));
  // Every window lies in the validation part: find its first 32 characters there.
  const auto row = d.inputs[0];
  bool found = false;
  for (size_t i = static_cast<size_t>(split); i + 33 <= text.ids.size() && !found; ++i) {
    found = true;
    for (int64_t j = 0; j < 32 && found; ++j) found = text.ids[i + static_cast<size_t>(j)] == row[j].item<uint8_t>();
  }
  EXPECT_TRUE(found);
  // A folder: its fortune files (those with a .dat beside them), nothing else.
  char made[] = "/tmp/ddpw-gpt-text-XXXXXX";
  ASSERT_NE(::mkdtemp(made), nullptr);
  const std::string dir = made;
  std::ofstream(dir + "/a") << std::string(3000, 'a');
  std::ofstream(dir + "/a.dat") << "index";
  std::ofstream(dir + "/notes") << std::string(3000, 'b');
  const ddpw::Text folder = ddpw::load_text(dir);
  EXPECT_EQ(folder.files, (std::vector<std::string>{dir + "/a"}));
  EXPECT_EQ(folder.alphabet, "a");
  ddp::remove_tree(dir);
  try {
    ddpw::load_text(dir);
    ADD_FAILURE() << "a missing text was read";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.hint()).find("apt-get install fortunes"), std::string::npos) << e.hint();
  }
}

ddpw::Options gpt_options() {
  ddpw::Options o;
  o.dataset = "fortunes";
  o.model = "gpt";
  o.data_dir = kText;
  o.seed = 5;
  return o;
}

// Each rank trains on its half of every batch under DDP and, beside it, a plain copy on the whole
// batch (no communication); after the steps the two agree and the loss has fallen.
int ddp_equals_one_process(int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
  torch::set_num_threads(1);
  const ddpw::Workload w = ddpw::make_workload(gpt_options());
  auto model = w.make_model(torch::kCPU), reference = w.make_model(torch::kCPU);
  ddp::DistributedDataParallel<ddpw::Model> ddp_model(model, pg);
  auto optimizer = w.make_optimizer(*model), reference_optimizer = w.make_optimizer(*reference);
  const int64_t batch = 8, half = batch / 2, steps = 12;
  double first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const auto b = w.train.gather(torch::arange(step * batch, (step + 1) * batch));
    optimizer->zero_grad();
    w.loss(ddp_model.forward(b.input.narrow(0, rank * half, half)), b.target.narrow(0, rank * half, half)).backward();
    optimizer->step();
    reference_optimizer->zero_grad();
    const auto loss = w.loss(reference->forward(b.input), b.target);
    loss.backward();
    reference_optimizer->step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  double worst = 0;
  const auto params = model->parameters(), expected = reference->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    worst = std::max(worst, (params[i] - expected[i]).abs().max().item<double>());
  std::printf("[rank %d] loss %.4f -> %.4f after %ld steps; largest difference from one process %.3g\n", rank, first,
              last, static_cast<long>(steps), worst);
  return worst < 1e-4 && last < first - 0.3 ? 0 : 1;
}

// The sample: greedy is the same every time (an untrained GPT's may be all blanks: then no line);
// with a temperature the same seed gives the same lines, non-empty, and the run's own random
// numbers are untouched; every character is the vocabulary's (or a space for a control character,
// '?' for a byte that is no whole UTF-8 character);
// at most 3 lines of at most 72; the model's training mode is restored; a wrong alphabet is refused.
TEST(Gpt, SampleLinesAreFromTheVocabularyGreedyIsDeterministic) {
  const ddpw::Workload w = ddpw::make_workload(gpt_options());
  ASSERT_FALSE(w.alphabet.empty());
  auto model = std::dynamic_pointer_cast<ddpw::Gpt>(w.make_model(torch::kCPU));
  ASSERT_TRUE(model);
  model->train();
  auto check = [&](const std::vector<std::string>& lines) {
    EXPECT_LE(lines.size(), 3u);
    for (const auto& line : lines) {
      EXPECT_FALSE(line.empty());
      EXPECT_LE(line.size(), 72u);
      EXPECT_NE(line.front(), ' ');
      for (const char c : line) EXPECT_TRUE(c == ' ' || c == '?' || w.alphabet.find(c) != std::string::npos) << line;
    }
  };
  const auto greedy = ddpw::sample_gpt(*model, w.alphabet, {});
  EXPECT_EQ(ddpw::sample_gpt(*model, w.alphabet, {}), greedy);
  EXPECT_TRUE(model->is_training());
  check(greedy);
  ddpw::SampleSettings warm;
  warm.temperature = 1.0;
  warm.seed = 7;
  torch::manual_seed(11);
  const auto drawn = ddpw::sample_gpt(*model, w.alphabet, warm);
  const auto after = torch::rand({4});
  torch::manual_seed(11);
  EXPECT_TRUE(torch::equal(torch::rand({4}), after)) << "sampling drew from the run's generator";
  EXPECT_EQ(ddpw::sample_gpt(*model, w.alphabet, warm), drawn);
  EXPECT_FALSE(drawn.empty()) << "an untrained GPT's draws at temperature 1 are all blank";
  check(drawn);
  EXPECT_THROW(ddpw::sample_gpt(*model, w.alphabet.substr(1), {}), ddp::Error);
}

TEST(Gpt, TwoRanksEqualOneProcessAndTheLossFalls) {
  EXPECT_EQ(ddp_test::run_ranks(2, [](int r, auto pg) { return ddp_equals_one_process(r, pg); }), 0);
}

}  // namespace gpt_tests
