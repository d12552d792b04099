// defines: StepTrace — the course's --trace FILE: the library's timeline (ddp/timeline.h) switched
//          on for --trace-steps training steps after the run's first kTraceWarmupSteps (memory is
//          allocated and threads start there), each step a span on the lane "steps", and at the end
//          every rank's timeline gathered into one Chrome trace file, written by global rank 0.
#pragma once

#include <cstdint>
#include <string>

#include "course/options.h"
#include "ddp/timeline.h"

namespace ddp {
class ProcessGroup;
}  // namespace ddp

namespace ddpw {

class StepTrace {
 public:
  StepTrace(const Options& options, int global_rank);
  ~StepTrace();  // stops the timeline if it still runs
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  // After each training step: `step` of `epoch` is done (on a GPU: queued; the span is the host's).
  void step_done(int64_t epoch, int64_t step);

  // Every rank calls it once, at the end (the timelines are gathered through the process group's
  // store); rank 0 writes the file and returns the line to print, the others "".
  std::string write(ddp::ProcessGroup* pg);

 private:
  const Options& options_;
  int rank_;
  int64_t steps_seen_ = 0, recorded_ = 0, first_epoch_ = -1, first_step_ = -1;
  bool running_ = false;
  ddp::TimelineClock::time_point last_;
};

}  // namespace ddpw
