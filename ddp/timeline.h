// defines: the timeline recorder — an opt-in record of what a rank did when, written as Chrome trace
//          JSON (Perfetto, ui.perfetto.dev, and chrome://tracing open it): start_timeline,
//          stop_timeline, timeline_on, TimelineScope, record_timeline_span, record_collective,
//          timeline_events, write_chrome_trace.
//
// What it records, once start_timeline() is called (nothing before: every entry point returns at
// once, and no callback is installed):
//  * each autograd node that runs during backward, on the thread that runs it (a LibTorch
//    RecordFunction callback for the scope BACKWARD_FUNCTION only: forward ops are not observed);
//    category "backward", named after the node (AddmmBackward0, ...);
//  * each collective handed to record_collective, from its launch until its Work completes (the
//    Work's future calls back, on the backend's thread), in category "collective" on the lane
//    "collectives" (collectives that overlap in time get a lane each when written);
//  * the spans a caller adds: a TimelineScope (this thread, construction to destruction) or
//    record_timeline_span (any lane, any times).
// Times are the steady clock (CLOCK_MONOTONIC on Linux), in microseconds: ranks on one host share
// it, so their lanes line up; ranks on different hosts each keep their own clock.
// On a GPU, a collective's end is when its future completes (for NCCL: when the work was enqueued
// and its CUDA events are recorded), not when the GPU finished it. Measured on the CPU (Gloo) only.
//
// Cost: off, one atomic load per entry point. On, a mutex and a vector push per span, and the
// RecordFunction callback per autograd node. At most TimelineOptions::max_spans spans are kept;
// past that, spans are counted and dropped, and the trace says how many.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

struct TimelineOptions {
  int rank = 0;                  // the trace's process id (one per rank), shown as "rank N"
  size_t max_spans = 1'000'000;  // kept spans; more are dropped and counted
  bool backward_nodes = true;    // record each autograd node of backward (RecordFunction)
};

// Starts recording in this process (again after a stop: the spans recorded so far stay).
void start_timeline(const TimelineOptions& options);
// Stops recording (spans already recorded stay until timeline_events(clear = true)).
void stop_timeline();
bool timeline_on();

using TimelineClock = std::chrono::steady_clock;

// A span on the calling thread's lane, from construction to destruction.
class TimelineScope {
 public:
  TimelineScope(const char* name, const char* category);
  ~TimelineScope();
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  const char* name_;
  const char* category_;
  TimelineClock::time_point start_;
  bool on_;
};

// A span on a named lane ("" = the calling thread's), between two times.
void record_timeline_span(const std::string& name, const std::string& category, const std::string& lane,
                          TimelineClock::time_point start, TimelineClock::time_point end);

// A collective from now until `work` completes; `bytes` is what it reduces (shown in the trace).
// A null work (nothing sent) records nothing.
void record_collective(const c10::intrusive_ptr<c10d::Work>& work, const std::string& name, int64_t bytes);

// This process's spans as a JSON array of Chrome trace events (metadata events naming the rank and
// its lanes included). clear: forget them afterwards.
std::string timeline_events(bool clear = false);

// Writes one trace file from every rank's timeline_events() (e.g. gathered on rank 0), atomically.
// `about` goes into the file's "otherData" (what ran, with which options). Throws ddp::Error, whose
// hint names `option` (the setting that chose the path).
void write_chrome_trace(const std::string& path, const std::vector<std::string>& events_per_rank,
                        const std::string& about, const std::string& option);

}  // namespace ddp
