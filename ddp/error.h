// defines: ddp::Error (a message plus a hint a person can act on), DDP_CHECK, run_main.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace ddp {

// Exit codes every program of the course uses.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
// A snapshot was written because of SIGTERM/SIGUSR1: the batch script requeues the job.
inline constexpr int kExitRequeue = 75;  // EX_TEMPFAIL

// An error the user can fix: what went wrong, and a hint with the likely fix.
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, std::string hint = "") : std::runtime_error(what), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

// Runs a program's body, turning every exception into one readable message and an exit code.
// The prefix (e.g. "[hello]") tells which process failed in a multi-process log, unless
// set_error_prefix has named the process. First it applies keep_freed_host_memory()
// (host_memory.h), so every program gets the same allocator settings, and makes stdout line
// buffered, so that the lines of several ranks in one log stay whole and in order without a
// flush after every print.
int run_main(const std::function<int()>& body, const std::string& prefix = "");

// From now on run_main's error lines start with `prefix`. check_launch (launch_env.h) sets
// "[rank R @ host]" once it knows the rank: a merged srun log then says who failed.
void set_error_prefix(const std::string& prefix);

}  // namespace ddp

#define DDP_CHECK(cond, what, hint)                  \
  do {                                               \
    if (!(cond)) throw ::ddp::Error((what), (hint)); \
  } while (0)
