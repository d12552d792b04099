// defines: SampleSettings and sample_gpt — a few lines written by the GPT, character by character
//          (nanoGPT's sample.py, without its prompt file): what a run of --model gpt learned, which
//          rank 0 prints at the end of training (EpochReporter::end_training: "Sample: ...").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "course/models.h"

namespace ddpw {

struct SampleSettings {
  double temperature = 0;        // 0: the likeliest character every time (greedy: the same lines every run)
  uint64_t seed = 0;             // temperature > 0: the seed of the draws' own generator (not the run's)
  int64_t max_characters = 200;  // written at most (a fortune's few lines: cheap on any device)
  size_t lines = 3;              // complete lines returned at most
  size_t line_width = 72;        // a longer line is cut
};

// Continues a newline (the alphabet's first character if it has none), feeding the model its last
// `context` characters, until `lines` non-empty lines are complete or `max_characters` were written
// (an unfinished last line counts too). Control characters become spaces and a byte that is no whole
// UTF-8 character '?'; the spaces at either end go; blank lines and "%" (the fortune files'
// separators) are left out. Runs on the model's device without gradients (inference mode), in eval
// mode (the model's mode is restored); the run's random numbers are not touched. `alphabet` maps
// the GPT's ids to characters (Workload::alphabet); its size must be the GPT's vocabulary.
std::vector<std::string> sample_gpt(Gpt& model, const std::string& alphabet, const SampleSettings& settings);

}  // namespace ddpw
