// defines: run_main — a program's body with every exception turned into one readable line and an
//          exit code (ddp/error.h's), after the process-wide settings of ddp::configure_process;
//          set_error_prefix, which names the process in those lines.
#pragma once

#include <functional>
#include <string>

#include "ddp/error.h"  // Error, the exit codes

namespace ddpw {

// Runs a program's body, turning every exception into one readable message and an exit code.
// The prefix (e.g. "[hello]") tells which process failed in a multi-process log, unless
// set_error_prefix has named the process. First it applies ddp::configure_process with every
// setting on (process.h: SIGPIPE ignored, the end with torchrun, NCCL's error handling, malloc
// keeping freed memory, stdout line buffered), so every program gets the same process.
int run_main(const std::function<int()>& body, const std::string& prefix = "");

// From now on run_main's error lines start with `prefix`. check_launch (check_launch.h) sets
// "[rank R @ host]" once it knows the rank: a merged srun log then says who failed.
void set_error_prefix(const std::string& prefix);

}  // namespace ddpw
