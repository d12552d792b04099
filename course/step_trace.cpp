#include "course/step_trace.h"

#include <fmt/format.h>

#include <vector>

#include "ddp/process_group.h"

namespace ddpw {

StepTrace::StepTrace(const Options& options, int global_rank) : options_(options), rank_(global_rank) {}

StepTrace::~StepTrace() {
  if (running_) ddp::stop_timeline();
}

void StepTrace::step_done(int64_t epoch, int64_t step) {
  const auto now = ddp::TimelineClock::now();
  ++steps_seen_;
  if (steps_seen_ == kTraceWarmupSteps) {  // the next step is the first one recorded
    ddp::TimelineOptions timeline;
    timeline.rank = rank_;
    ddp::start_timeline(timeline);
    running_ = true;
    last_ = now;
    return;
  }
  if (steps_seen_ < kTraceWarmupSteps || recorded_ >= options_.trace_steps) return;
  if (recorded_++ == 0) {
    first_epoch_ = epoch;
    first_step_ = step;
  }
  ddp::record_timeline_span(fmt::format("epoch {} step {}", epoch, step), "step", "steps", last_, now);
  last_ = now;
  if (recorded_ == options_.trace_steps) {
    ddp::stop_timeline();
    running_ = false;
  }
}

std::string StepTrace::write(ddp::ProcessGroup* pg) {
  if (running_) ddp::stop_timeline();
  running_ = false;
  const std::string mine = ddp::timeline_events(/*clear=*/true);
  const std::vector<std::string> all = pg ? pg->all_gather_strings(mine) : std::vector<std::string>{mine};
  if (rank_ != 0) return "";
  const std::string what =
      recorded_ == 0
          ? fmt::format("no step (the run had {} steps; the first {} are not recorded)", steps_seen_, kTraceWarmupSteps)
          : fmt::format("{} steps from epoch {} step {}", recorded_, first_epoch_, first_step_);
  const std::string about =
      fmt::format("{}: {} of {} ranks; --dataset {}, --batch-size {}, --bucket-mb {}", options_.program.label(), what,
                  all.size(), options_.dataset, options_.batch_size, options_.bucket_mb);
  ddp::write_chrome_trace(options_.trace_path, all, about, "--trace");
  return fmt::format("Timeline of {} of {} ranks written to {} (open it in Perfetto, or draw it: scripts/plot {})",
                     what, all.size(), options_.trace_path, options_.trace_path);
}

}  // namespace ddpw
