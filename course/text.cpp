// A plain text as a character-level data set (nanoGPT's shakespeare_char, read in C++).
#include "course/text.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ddp/error.h"

namespace ddpw {

namespace fs = std::filesystem;

namespace {
const std::string kInstallHint =
    "install Debian's fortunes package (apt-get install fortunes; scripts/setup.sh --rest does), or give "
    "--data-dir a plain text file";

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  DDP_CHECK(in, "cannot read " + file.string(), kInstallHint);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

Text load_text(const std::string& path) {
  Text t;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const fs::path p = entry.path();
      if (entry.is_regular_file() && p.extension() != ".dat" && fs::exists(p.string() + ".dat"))
        t.files.push_back(p.string());
    }
    std::sort(t.files.begin(), t.files.end());
  } else if (fs::is_regular_file(path, ec)) {
    t.files.push_back(path);
  }
  DDP_CHECK(!t.files.empty(), "no text in " + path + " (neither a file nor a folder of fortune files)", kInstallHint);
  std::string text;
  for (const auto& f : t.files) text += read_file(f);
  DDP_CHECK(text.size() >= 1024,
            path + " holds " + std::to_string(text.size()) + " characters: too little to learn from",
            "give --data-dir a text of at least a few kilobytes");
  std::array<bool, 256> seen{};
  for (const char c : text) seen[static_cast<uint8_t>(c)] = true;
  std::array<uint8_t, 256> index{};
  for (int b = 0; b < 256; ++b)
    if (seen[b]) {
      index[b] = static_cast<uint8_t>(t.alphabet.size());
      t.alphabet.push_back(static_cast<char>(b));
    }
  t.ids.reserve(text.size());
  for (const char c : text) t.ids.push_back(index[static_cast<uint8_t>(c)]);
  return t;
}

ddp::Dataset char_windows(const Text& text, int64_t begin, int64_t end, int64_t count, int64_t context, uint64_t seed) {
  DDP_CHECK(end - begin > context + 1,
            "a window of " + std::to_string(context) + " characters does not fit in a part of " +
                std::to_string(end - begin) + " characters",
            "use a longer text (--data-dir) or a smaller --gpt-size");
  const auto all =
      torch::from_blob(const_cast<uint8_t*>(text.ids.data()), {static_cast<int64_t>(text.ids.size())}, torch::kUInt8);
  auto gen = at::detail::createCPUGenerator(seed);
  const auto starts = torch::randint(begin, end - context, {count, 1}, gen, torch::kInt64);
  const auto positions = starts + torch::arange(context + 1, torch::kInt64);  // [count, context + 1]
  const auto windows = all.index_select(0, positions.flatten()).view({count, context + 1});
  ddp::Dataset d;
  d.inputs = windows.narrow(1, 0, context).contiguous();                     // uint8 ids
  d.targets = windows.narrow(1, 1, context).to(torch::kInt64).contiguous();  // the next character of each
  return d;
}

}  // namespace ddpw
