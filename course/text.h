// defines: load_text (a plain English text: one file, or the fortune cookie files of a folder, read
//          offline) and char_windows (a character-level language-modelling data set: windows of the
//          text and the same windows shifted by one character).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/data.h"

namespace ddpw {

// The text of --dataset fortunes: Debian's `fortunes` and `fortunes-min` packages put their
// cookie files (plain text, one quotation after another, "%" lines between them) in this folder.
inline constexpr const char* kFortunesFolder = "/usr/share/games/fortunes";

struct Text {
  std::vector<uint8_t> ids;        // the text, each byte replaced by its index in `alphabet`
  std::string alphabet;            // the distinct bytes of the text, sorted: the GPT's vocabulary
  std::vector<std::string> files;  // what was read, in order
};

// `path` is a file (read whole) or a folder: the fortune files in it (every file that has a
// `<name>.dat` index beside it, as strfile writes them), in name order, joined. Throws naming the
// path and the package to install when there is nothing to read.
Text load_text(const std::string& path);

// `count` windows of `context` characters from ids[begin, end) at offsets drawn from `seed`:
// inputs [count, context] (uint8 ids), targets [count, context] (int64: each input shifted by one).
ddp::Dataset char_windows(const Text& text, int64_t begin, int64_t end, int64_t count, int64_t context, uint64_t seed);

}  // namespace ddpw
