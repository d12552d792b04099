#include "course/gpt_sample.h"

#include <ATen/CPUGeneratorImpl.h>  // defines: make_generator<CPUGeneratorImpl> (the draws' own generator)

#include <algorithm>

#include "ddp/error.h"

namespace ddpw {

namespace {

// The bytes of a whole UTF-8 character starting at line[i] (the text's own, é or “), else 0: the GPT
// writes byte by byte, and a byte that starts no character, or a character cut short, is not text.
size_t utf8_length(const std::string& line, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(line[k]); };
  const unsigned char lead = byte(i);
  const size_t n = lead >= 0xC2 && lead <= 0xDF   ? 2
                   : lead >= 0xE0 && lead <= 0xEF ? 3
                   : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                  : 0;
  if (n == 0 || i + n > line.size()) return 0;
  for (size_t k = i + 1; k < i + n; ++k)
    if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
  return n;
}

// The line as printed: control characters as spaces, a byte that is no whole UTF-8 character as
// '?', no spaces at either end, at most `width` bytes (not cutting a character).
std::string tidy(const std::string& raw, size_t width) {
  std::string line;
  for (size_t i = 0; i < raw.size();) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c < 0x80) {
      line += c < 0x20 || c == 0x7f ? ' ' : raw[i];
      ++i;
    } else if (const size_t n = utf8_length(raw, i); n > 0) {
      line += raw.substr(i, n);
      i += n;
    } else {
      line += '?';
      ++i;
    }
  }
  const size_t first = line.find_first_not_of(' '), last = line.find_last_not_of(' ');
  if (first == std::string::npos) return "";
  size_t end = std::min(last + 1, first + width);
  while (end > first && end < line.size() && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;
  while (end > first && line[end - 1] == ' ') --end;  // a cut may end on a space
  return line.substr(first, end - first);
}

// Adds the finished line unless it is blank or a fortune separator ("%").
void add_line(std::vector<std::string>& lines, const std::string& raw, size_t width) {
  std::string line = tidy(raw, width);
  if (!line.empty() && line != "%") lines.push_back(std::move(line));
}

}  // namespace

std::vector<std::string> sample_gpt(Gpt& model, const std::string& alphabet, const SampleSettings& settings) {
  const GptConfig& config = model.config();
  DDP_CHECK(static_cast<int64_t>(alphabet.size()) == config.vocab,
            "the alphabet has " + std::to_string(alphabet.size()) + " characters, the GPT's vocabulary " +
                std::to_string(config.vocab),
            "sample with the alphabet of the text the GPT was built for (Workload::alphabet)");
  const auto params = model.parameters();
  DDP_CHECK(!params.empty(), "sample_gpt: the GPT holds no parameters", "sample a model that holds its weights");
  const torch::Device device = params.front().device();
  c10::InferenceMode inference;  // no autograd bookkeeping: each character is one small forward
  const bool was_training = model.is_training();
  model.eval();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(settings.seed);

  const size_t newline = alphabet.find('\n');
  std::vector<int64_t> ids{newline == std::string::npos ? 0 : static_cast<int64_t>(newline)};
  std::vector<std::string> lines;
  std::string line;
  for (int64_t n = 0; n < settings.max_characters && lines.size() < settings.lines; ++n) {
    const auto window = std::min<int64_t>(static_cast<int64_t>(ids.size()), config.context);
    const auto input = torch::tensor(std::vector<int64_t>(ids.end() - window, ids.end()), torch::kInt64)
                           .to(device, torch::kFloat)  // ids arrive as float, as the data set's batches
                           .unsqueeze(0);
    const auto logits = model.forward(input).select(1, window - 1).squeeze(0).to(torch::kCPU, torch::kFloat64);
    const int64_t next =
        settings.temperature > 0
            ? torch::multinomial(torch::softmax(logits / settings.temperature, 0), 1, false, generator).item<int64_t>()
            : logits.argmax().item<int64_t>();
    ids.push_back(next);
    const char c = alphabet[static_cast<size_t>(next)];
    if (c == '\n') {
      add_line(lines, line, settings.line_width);
      line.clear();
    } else {
      line += c;
    }
  }
  if (lines.size() < settings.lines) add_line(lines, line, settings.line_width);
  model.train(was_training);
  return lines;
}

}  // namespace ddpw
