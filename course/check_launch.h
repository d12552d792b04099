// defines: LaunchValues and check_launch — what a step program read about itself from its launcher
//          (with ddp::env, env_int, job_port of launch_env.h), checked against the library's own reading
//          of the launcher (resolve_launch_env) and completed into a ddp::LaunchEnv.
#pragma once

#include <optional>
#include <string>

#include "ddp/launch_env.h"

namespace ddpw {

struct Options;

// What a step program read about itself (steps 1-3 fill it in, on screen); unset means "not
// given". check_launch checks it and completes it into a ddp::LaunchEnv.
struct LaunchValues {
  std::optional<int> global_rank, local_rank, world_size, local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// The step programs' resolver. Checks `me` and returns the launch description:
// - nothing read (`me` empty): one process, rank 0 of 1 — unless a launcher started this
//   process as one of several ranks, which is an error naming what to do (for an exercise: the
//   TODO(stepN) to complete);
// - values read from a launcher's environment must agree with the library's own reading of it
//   (resolve_launch_env): a wrong variable is an error naming the right one, before anyone waits;
// - values a program set itself (step 1's workers, which spawn started) are taken as they are;
// - what was not read is completed (local world size from the launcher, master 127.0.0.1 when
//   all ranks share this node; the port rules of resolve_launch_env), then --master-addr, --master-port and
//   --init-method apply, and every value is range-checked with the launcher's variable named in the fix.
// Once the rank is known, run_main's errors start with "[rank R @ host]" (set_error_prefix).
ddp::LaunchEnv check_launch(const LaunchValues& me, const Options& options);

}  // namespace ddpw
