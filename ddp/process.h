// defines: configure_process and ProcessSettings — the process-wide settings a distributed training
//          program wants, in one explicit call: ignore SIGPIPE, end with torchrun, NCCL's error handling
//          defaults, glibc's malloc keeping freed memory, line-buffered stdout. The library applies
//          none of them by itself (a library must not change its host program behind its back: a
//          server may rely on SIGPIPE); a training program calls this once, first thing in main.
#pragma once

namespace ddp {

struct ProcessSettings {
  // When a peer dies, Gloo's next write to its socket raises SIGPIPE, which by default ends this
  // process at once and silently (exit -13) instead of failing the collective with an error that
  // names the peer. Python ignores SIGPIPE at start-up, so Python DDP never meets this.
  bool ignore_sigpipe = true;
  // Under torchrun (RANK and WORLD_SIZE set): PR_SET_PDEATHSIG, so that this worker does not
  // outlive the torchrun agent that started it (an agent killed by a time limit).
  bool end_with_torchrun = true;
  // NCCL's failure handling, where the user has not chosen (the variables ProcessGroupNCCL reads
  // when it is made; process_group.h says why): TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (abort the
  // communicator, keep the process, so the host reports the error instead of a SIGABRT),
  // TORCH_NCCL_DUMP_ON_TIMEOUT=0 (no flight-recorder dump into a shared /tmp file, no monitor
  // thread killing the process minutes later) and, without a dump, TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000
  // (sleep 1 s, not 60 s, before the abort).
  bool nccl_error_handling = true;
  // keep_freed_host_memory() (host_memory.h): a training step stops paying page faults for the
  // tensors it frees and allocates again. ZeroDataParallel then returns its parameters' old storage
  // to the kernel once, after moving them into its buckets (release_freed_host_memory()).
  bool keep_freed_host_memory = true;
  // stdout line buffered (it is block buffered into a pipe or a file): the lines of several ranks
  // in one log stay whole and in order without a flush after every print.
  bool line_buffered_stdout = true;
};

// Applies `settings` to this process; a field that is false is left as it is. Call it first in
// main (before any tensor and any thread). Calling it again applies the fields set then (each
// effect is idempotent); nothing is ever undone.
void configure_process(const ProcessSettings& settings = {});

// What configure_process has applied so far in this process (every field false before any call).
const ProcessSettings& process_settings();

}  // namespace ddp
