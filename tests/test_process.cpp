// configure_process: each process-wide setting is applied only when asked for, by this one call,
// and process_settings() says what was applied; the user's own NCCL choices win.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string>

#include "ddp/error.h"
#include "ddp/process.h"

namespace {

std::string getenv_or(const char* name, const char* otherwise) {
  const char* v = std::getenv(name);
  return v ? v : otherwise;
}

TEST(ConfigureProcess, AppliesOnlyWhatIsAskedAndSaysSo) {
  struct sigaction before {};
  ::sigaction(SIGPIPE, nullptr, &before);
  ::signal(SIGPIPE, SIG_DFL);
  ::unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  ::setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", 1);  // the user's choice: kept, and then no short sleep
  ::unsetenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC");

  ddp::ProcessSettings none{false, false, false, false, false};
  ddp::configure_process(none);
  struct sigaction now {};
  ::sigaction(SIGPIPE, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  EXPECT_EQ(getenv_or("TORCH_NCCL_ASYNC_ERROR_HANDLING", "(unset)"), "(unset)");

  ddp::ProcessSettings some = none;
  some.ignore_sigpipe = true;
  some.nccl_error_handling = true;
  ddp::configure_process(some);
  ::sigaction(SIGPIPE, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  EXPECT_TRUE(ddp::process_settings().ignore_sigpipe);
  EXPECT_TRUE(ddp::process_settings().nccl_error_handling);
  EXPECT_EQ(getenv_or("TORCH_NCCL_ASYNC_ERROR_HANDLING", "(unset)"), "2");
  EXPECT_EQ(getenv_or("TORCH_NCCL_DUMP_ON_TIMEOUT", "(unset)"), "1");
  EXPECT_EQ(getenv_or("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "(unset)"), "(unset)");

  ::sigaction(SIGPIPE, &before, nullptr);
  ::unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  ::unsetenv("TORCH_NCCL_DUMP_ON_TIMEOUT");
}

// A broken invariant of the library is a bug report, not a user's error: not a ddp::Error (whose
// hint the user would follow), and its message says where and asks for a report.
TEST(InternalAssert, IsABugReportNotAUserError) {
  try {
    DDP_INTERNAL_ASSERT(1 + 1 == 3, "arithmetic failed");
    ADD_FAILURE() << "no throw";
  } catch (const ddp::Error&) {
    ADD_FAILURE() << "an internal assert threw a user error";
  } catch (const ddp::InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("internal error in the ddp library (" __FILE__ ":"), std::string::npos) << what;
    EXPECT_NE(what.find("arithmetic failed"), std::string::npos) << what;
    EXPECT_NE(what.find("please report it"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(DDP_INTERNAL_ASSERT(1 + 1 == 2, "arithmetic failed"));
}

}  // namespace
