// defines: ddp::Error (a message plus a hint a person can act on), DDP_CHECK, the exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace ddp {

// Exit codes: what spawn() returns for its workers, and what the programs built on the library return.
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

}  // namespace ddp

#define DDP_CHECK(cond, what, hint)                  \
  do {                                               \
    if (!(cond)) throw ::ddp::Error((what), (hint)); \
  } while (0)
