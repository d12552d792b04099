// The end-of-run check of the ranks' weights: replicas that differ stop the run, and the fix it
// names depends on the program. In an exercise (step 1 half done: ranks on their own shards, model
// not wrapped yet) it points to the wrapper and the TODO; in step 1b's exercise (never wrapped) to
// the averaging by hand and its TODO; in a solution it is a bug to report.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "course/epoch_report.h"
#include "course/models.h"
#include "course/options.h"
#include "course/workload.h"
#include "ddp/error.h"
#include "multiprocess.h"

namespace {

// 0 when end_training on ranks whose weights differ throws an error whose hint contains each of
// `expected`. One call per test and kind: a rank re-runs its test from the top up to its own phase.
int differing_replicas_hint_contains(const std::string& kind, const std::vector<std::string>& expected,
                                     const std::string& program = "step1_multigpu_fork") {
  return ddp_test::run_ranks(
      2,
      [&](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
        ddpw::Options options;
        options.dataset = "synthetic";
        options.program = {program, kind, "", 1};
        const ddpw::Workload workload = ddpw::make_workload(options);
        auto model = std::make_shared<ddpw::LinearRegressor>(20);
        {
          torch::NoGradGuard no_grad;
          for (auto& p : model->parameters()) p.fill_(0.5 * (rank + 1));  // each rank its own weights
        }
        ddpw::EpochReporter reporter(options, ddp_test::test_launch(rank, 2), torch::kCPU, workload, pg.get());
        try {
          reporter.end_training(*model);
        } catch (const ddp::Error& e) {
          bool named = std::string(e.what()).find("final weights differ") != std::string::npos;
          for (const auto& words : expected) named = named && e.hint().find(words) != std::string::npos;
          if (!named) std::fprintf(stderr, "rank %d: %s (fix: %s)\n", rank, e.message().c_str(), e.hint().c_str());
          return named ? 0 : 2;
        }
        std::fprintf(stderr, "rank %d: weights that differ passed the end-of-run check\n", rank);
        return 1;
      },
      std::chrono::seconds(60), kind + program);
}

}  // namespace

TEST(EpochReport, DifferingReplicasInAnExerciseNameTheWrapperAndTheTodo) {
  EXPECT_EQ(differing_replicas_hint_contains("exercise", {"wrapped in DistributedDataParallel", "TODO(step1)"}), 0);
}

TEST(EpochReport, DifferingReplicasInStep1bNameTheAveragingByHandAndItsTodo) {
  EXPECT_EQ(differing_replicas_hint_contains(
                "exercise",
                {"sum every parameter's gradient over the ranks", "TODO(step1b) in step1b_average_by_hand/main.cpp"},
                "step1b_average_by_hand"),
            0);
}

TEST(EpochReport, DifferingReplicasInASolutionAreABugToReport) {
  EXPECT_EQ(differing_replicas_hint_contains("solution", {"bug in gradient synchronisation"}), 0);
}
