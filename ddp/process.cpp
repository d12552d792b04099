#include "ddp/process.h"

#include <signal.h>
#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddp/error.h"
#include "ddp/host_memory.h"
#include "ddp/launch_env.h"

namespace ddp {
namespace {

ProcessSettings& applied() {
  static ProcessSettings settings{false, false, false, false, false};
  return settings;
}

bool started_by_torchrun() {
  try {
    return resolve_launch_env(current_environment()).launcher == "torchrun";
  } catch (const Error&) {
    return false;  // an inconsistent environment: whoever reads it reports it, with the fix
  }
}

}  // namespace

void configure_process(const ProcessSettings& s) {
  ProcessSettings& done = applied();
  if (s.ignore_sigpipe) {
    ::signal(SIGPIPE, SIG_IGN);
    done.ignore_sigpipe = true;
  }
  if (s.end_with_torchrun && started_by_torchrun()) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    done.end_with_torchrun = true;
  }
  if (s.nccl_error_handling) {
    const char* dump = std::getenv("TORCH_NCCL_DUMP_ON_TIMEOUT");
    if (dump == nullptr || std::string(dump) == "0") ::setenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "1000", 0);
    ::setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "0", 0);
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
    done.nccl_error_handling = true;
  }
  if (s.keep_freed_host_memory) {
    keep_freed_host_memory();  // before the first tensor: steps stop paying page faults
    done.keep_freed_host_memory = true;
  }
  if (s.line_buffered_stdout && !done.line_buffered_stdout) {
    std::fflush(stdout);
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);  // once: later calls would only flush and set it again
    done.line_buffered_stdout = true;
  }
}

const ProcessSettings& process_settings() { return applied(); }

}  // namespace ddp
