// defines: ddp::Error (a message plus the fix a person can act on, both in what()), DDP_CHECK, the exit
//          codes; ddp::InternalError and DDP_INTERNAL_ASSERT for what cannot happen (a bug in the
//          library, which no user can fix: it says where, and to report it).
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

// An error the user can fix: what went wrong, and a hint with the likely fix. what() carries both,
// "message (fix: hint)", so a program that prints what() shows the fix; message() and hint() are
// the two parts, for a program that lays them out itself.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string hint = "")
      : std::runtime_error(hint.empty() ? message : message + " (fix: " + hint + ")"),
        message_(message),
        hint_(std::move(hint)) {}
  const std::string& message() const { return message_; }  // what went wrong, without the fix
  const std::string& hint() const { return hint_; }        // the fix ("" when there is none)

 private:
  std::string message_;
  std::string hint_;
};

// A broken invariant of the library itself (PyTorch's TORCH_INTERNAL_ASSERT): not an Error, whose
// hint is a fix the user can make. what() says so, with the file and line, and asks for a report.
class InternalError : public std::logic_error {
 public:
  InternalError(const std::string& what, const char* file, int line)
      : std::logic_error("internal error in the ddp library (" + std::string(file) + ":" + std::to_string(line) +
                         "): " + what + "; this is a bug in the library, not in your program: please report it with " +
                         "this message") {}
};

}  // namespace ddp

#define DDP_INTERNAL_ASSERT(cond, what)                                  \
  do {                                                                   \
    if (!(cond)) throw ::ddp::InternalError((what), __FILE__, __LINE__); \
  } while (0)

#define DDP_CHECK(cond, what, hint)                  \
  do {                                               \
    if (!(cond)) throw ::ddp::Error((what), (hint)); \
  } while (0)
