// main() of torch_tests and gpu_tests. A rank that run_ranks() (multiprocess.h) started re-runs
// this binary with the parent's arguments; its filter is narrowed to the one test that started it,
// so it does not run the other tests the parent's filter matches.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ddp/spawn.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* test = std::getenv("DDPW_TEST_NAME"); test && ddp::is_spawned_worker()) GTEST_FLAG_SET(filter, test);
  return RUN_ALL_TESTS();
}
