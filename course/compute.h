// defines: configure_compute — how this rank computes: its intra-op threads (choose_threads,
//          device.h) and, with --deterministic, deterministic kernels (the condition for a GPU run
//          that is stopped and resumed to end bit for bit equal to an uninterrupted one).
#pragma once

#include "course/options.h"
#include "ddp/launch_env.h"

namespace ddpw {

// Sets this process's intra-op thread count and returns it. With options.deterministic:
// deterministic algorithms (an operation without a deterministic kernel is an error naming it),
// cuDNN's deterministic algorithms without benchmarking, and CUBLAS_WORKSPACE_CONFIG=:4096:8
// (unless already set) before the first cuBLAS handle. Call it before any tensor work.
int configure_compute(const Options& options, const ddp::LaunchEnv& launch);

}  // namespace ddpw
