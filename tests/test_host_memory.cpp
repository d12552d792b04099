// keep_freed_host_memory: applied by default, left alone when the user tunes malloc.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ddp/host_memory.h"

TEST(HostMemory, AppliedUnlessTheUserTunesMalloc) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc: its mallopt applies nothing";
#elif defined(__GLIBC__)
  ::unsetenv("GLIBC_TUNABLES");
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  EXPECT_TRUE(ddp::keep_freed_host_memory());
  ::setenv("MALLOC_TRIM_THRESHOLD_", "4096", 1);
  EXPECT_FALSE(ddp::keep_freed_host_memory());
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
#else
  GTEST_SKIP() << "not glibc: the allocator is left as it is";
#endif
}
