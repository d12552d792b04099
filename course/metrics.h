// defines: MetricsWriter (one CSV row per epoch, written by rank 0, user-only permissions) and
//          Progress (periodic lines with step, samples/s and ETA that suit batch logs; no
//          terminal escape codes unless stdout is a terminal).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace ddpw {

struct EpochMetrics {
  int64_t epoch = 0;
  int world_size = 1;
  int ranks_per_node = 1;
  int threads = 1;  // intra-op threads per rank (cpus-per-task)
  double train_loss = 0, test_loss = 0, test_accuracy = 0;
  double samples_per_s = 0;  // all ranks together, over the slowest rank's epoch time
  double epoch_seconds = 0;  // the slowest rank's
  double data_seconds = 0;   // the most any rank spent producing batches (ddp::Loader::batch)
};

class MetricsWriter {
 public:
  MetricsWriter() = default;                                     // writes nothing
  explicit MetricsWriter(const std::string& path, bool append);  // CSV; header when new
  void write(const EpochMetrics& m);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

 private:
  std::FILE* file_ = nullptr;
};

class Progress {
 public:
  // total_steps: steps of this epoch; every: a line every N steps (0: every 30 s); first_step:
  // the steps already done when this epoch's run began (a resumed epoch), left out of the rate.
  Progress(std::string prefix, int64_t total_steps, int64_t samples_per_step, int64_t every, int64_t first_step = 0);
  // Call after each step (`step` = steps done in this epoch). `loss` is called only when a line
  // is printed: reading a loss that lives on a GPU waits for the GPU.
  void update(int64_t step, const std::function<double()>& loss);
  void update(int64_t step, double loss) {
    update(step, [loss] { return loss; });
  }
  void finish();  // ends a terminal line

 private:
  std::string prefix_;
  int64_t total_, samples_per_step_, every_, first_step_;
  std::chrono::steady_clock::time_point start_, last_;
  bool tty_;
  bool open_line_ = false;
};

}  // namespace ddpw
