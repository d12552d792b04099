// The checks hello makes alone, without a GPU: the idle-GPU warning (the launch checks that need a
// network are tested by real launches in tests.cmake).
#include <gtest/gtest.h>

#include <string>

#include "diagnostics/preflight.h"

namespace {

TEST(IdleGpus, FewerRanksThanGpusIsAWarningWithTheFix) {
  const std::string w = diagnostics::idle_gpus_warning(/*ranks_on_node=*/2, /*visible_gpus=*/4);
  EXPECT_NE(w.find("2 rank(s) on "), std::string::npos) << w;
  EXPECT_NE(w.find("4 GPUs visible: 2 GPU(s) sit idle"), std::string::npos) << w;
  EXPECT_NE(w.find("--ntasks-per-node"), std::string::npos) << w;
  EXPECT_EQ(w.find('\n'), std::string::npos) << "not one line: " << w;
}

TEST(IdleGpus, NoWarningWhenEveryGpuHasARank) {
  EXPECT_EQ(diagnostics::idle_gpus_warning(4, 4), "");
  EXPECT_EQ(diagnostics::idle_gpus_warning(1, 1), "");  // --gpus-per-task=1: each task sees its own
  EXPECT_EQ(diagnostics::idle_gpus_warning(2, 1), "");  // more ranks than GPUs: choose_device's error
  EXPECT_EQ(diagnostics::idle_gpus_warning(1, 0), "");  // no GPU at all
}

}  // namespace
