// defines: StopAgreement — every rank stops at the same step once any rank got a stop signal
//          (SIGTERM, SIGINT or SIGUSR1: stop_signal.h), without a host synchronisation at every
//          step. The ranks agree only at check steps, and each agreement carries the next one.
#pragma once

#include <chrono>
#include <cstdint>

#include "ddp/stop_signal.h"  // install_stop_signal_handlers, stop_reason: a step program needs both

namespace ddp {

class ProcessGroup;

class StopAgreement {
 public:
  // How often the ranks check, in seconds of training (see should_stop).
  static constexpr double kCheckSeconds = 0.25;

  // pg may be null (one process): then the local signal is read at every step, which costs nothing.
  explicit StopAgreement(ProcessGroup* pg, double check_seconds = kCheckSeconds);

  // Call once before every step, on every rank. True on every rank at the same step once a stop
  // was requested on any of them.
  //
  // With several ranks it is a check step only every `interval` calls: one allreduce of
  // (stop requests, next interval), where the next interval is rank 0's proposal so that checks
  // come about every check_seconds at the step rate it measured since the previous check (at
  // least 1 step, at most twice the previous interval). All ranks count the same calls, so they
  // check, and stop, at the same step. The other calls read nothing and wait for nothing.
  //
  // Latency bound of a stop request: it is acted on at the next check step, at most `interval`
  // steps later, that is about check_seconds (0.25 s) plus the step in flight while the step
  // rate stays what it was over the previous interval; if steps become k times slower, k times
  // that. Without a process group: at the next step.
  bool should_stop();

  int64_t checks() const { return checks_; }      // allreduces so far (for tests and benchmarks)
  int64_t interval() const { return interval_; }  // steps between the current check and the next

 private:
  ProcessGroup* pg_;
  double check_seconds_;
  int64_t calls_ = 0, next_check_ = 0, interval_ = 1, checks_ = 0;
  std::chrono::steady_clock::time_point last_check_;
};

}  // namespace ddp
