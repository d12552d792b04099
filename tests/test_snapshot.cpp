// Snapshots record the program that wrote them: the same program resumes, another one (the
// exercise after the solution, another step, another dataset) is refused with a message that
// names both and the fix, and the file is left as it was.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "course/from_options.h"
#include "course/models.h"
#include "course/options.h"
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value
#include "ddp/sharded_snapshot.h"
#include "ddp/snapshot.h"

namespace {

class SnapshotIdentity : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmp[] = "/tmp/ddpw-snapshot-XXXXXX";
    ASSERT_NE(::mkdtemp(tmp), nullptr);
    dir_ = tmp;
  }
  void TearDown() override { ddp::remove_tree(dir_); }

  ddpw::Options run_of(const std::string& name, const std::string& kind, const std::string& dataset = "synthetic") {
    ddpw::Options o;
    o.program.name = name;
    o.program.kind = kind;
    o.dataset = dataset;
    o.snapshot_path = dir_ + "/shared.pt";  // one path for all: what --snapshot (or an old default) did
    return o;
  }

  // Saves with `writer`, loads with `reader`: the error text, or "" when it loaded.
  std::string load_as(const ddpw::Options& writer, const ddpw::Options& reader) {
    ddpw::LinearRegressor model(20);
    torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
    ddpw::save_snapshot(writer, model, optimizer, {5, 0, 2});
    const std::string before = bytes(writer.snapshot_path);
    ddpw::LinearRegressor other(20);
    torch::optim::SGD other_optimizer(other.parameters(), torch::optim::SGDOptions(0.1));
    std::string error;
    try {
      const auto state = ddpw::load_snapshot(reader, other, other_optimizer, 2);
      EXPECT_TRUE(state.has_value());
      EXPECT_EQ(state->epochs_run, 5);
    } catch (const ddp::Error& e) {
      error = e.message() + " (fix: " + e.hint() + ")";
    }
    EXPECT_EQ(bytes(writer.snapshot_path), before) << "loading changed the file";
    return error;
  }

  static std::string bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }

  std::string dir_;
};

TEST_F(SnapshotIdentity, TheSameProgramResumes) {
  EXPECT_EQ(load_as(run_of("step2_env_launch", "solution"), run_of("step2_env_launch", "solution")), "");
}

TEST_F(SnapshotIdentity, TheExerciseRefusesTheSolutionsSnapshot) {
  // The measured bug: the step 2 solution under torchrun, then the step 2 exercise in the same
  // folder "resumed at epoch 5", trained nothing and printed the solution's checksum.
  const std::string error = load_as(run_of("step2_env_launch", "solution"), run_of("step2_env_launch", "exercise"));
  EXPECT_NE(error.find("was written by step2_env_launch (solution) training synthetic, not by this run, "
                       "step2_env_launch (exercise) training synthetic"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find(ddp::setting_value(ddp::Setting::kSnapshotPath, "PATH")), std::string::npos) << error;
  EXPECT_NE(error.find(ddp::setting_name(ddp::Setting::kFreshStart)), std::string::npos) << error;
}

TEST_F(SnapshotIdentity, AnotherStepOrDatasetIsRefused) {
  EXPECT_NE(load_as(run_of("step1_multigpu_fork", "solution"), run_of("step2_env_launch", "solution"))
                .find("written by step1_multigpu_fork (solution)"),
            std::string::npos);
  // Same model, same shapes: only the recorded dataset tells MNIST from Fashion-MNIST.
  EXPECT_NE(
      load_as(run_of("step0_single_gpu", "program", "mnist"), run_of("step0_single_gpu", "program", "fashion-mnist"))
          .find("step0_single_gpu training mnist, not by this run, step0_single_gpu training fashion-mnist"),
      std::string::npos);
}

TEST_F(SnapshotIdentity, FreshIgnoresTheFile) {
  ddpw::LinearRegressor model(20);
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
  ddpw::save_snapshot(run_of("step2_env_launch", "solution"), model, optimizer, {5, 0, 2});
  auto reader = run_of("step2_env_launch", "exercise");
  reader.fresh = true;
  EXPECT_FALSE(ddpw::load_snapshot(reader, model, optimizer, 2).has_value());
}

// Files written before the writer's label (a name and a variant apart: meta/program, meta/kind; the
// manifest's name, kind, step), by the step 2 and step 4 solutions of commit 0375d5a
// (tests/data/README.md): their writer still reads as "name (variant)", so the program resumes.
TEST_F(SnapshotIdentity, FilesWrittenBeforeTheWriterLabelStillLoad) {
  const std::string data = std::string(DDPW_TEST_DATA_DIR) + "/before_writer_label/";
  EXPECT_EQ(ddp::snapshot_writer(data + "step2_solution.pt"), "step2_env_launch (solution) training synthetic");
  EXPECT_EQ(ddp::sharded_snapshot_writer(data + "step4_solution.json"), "step4_sharded (solution) training synthetic");
  auto solution = run_of("step2_env_launch", "solution");
  { std::ofstream(solution.snapshot_path, std::ios::binary) << bytes(data + "step2_solution.pt"); }
  ddpw::LinearRegressor model(20);
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
  const auto state = ddpw::load_snapshot(solution, model, optimizer, 1);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->epochs_run, 1);
  try {
    ddpw::load_snapshot(run_of("step2_env_launch", "exercise"), model, optimizer, 1);
    ADD_FAILURE() << "the exercise resumed the solution's snapshot";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("written by step2_env_launch (solution) training synthetic, not by this run"),
              std::string::npos)
        << e.what();
  }
}

TEST(DefaultSnapshotPath, EveryProgramHasItsOwn) {
  auto id = [](const std::string& name, const std::string& kind, int step) {
    ddpw::ProgramId p;
    p.name = name;
    p.kind = kind;
    p.step = step;
    return ddpw::default_snapshot_path(p);
  };
  EXPECT_EQ(id("step0_single_gpu", "program", 0), "snapshot-step0.pt");
  EXPECT_EQ(id("step2_env_launch", "exercise", 2), "snapshot-step2-exercise.pt");
  EXPECT_EQ(id("step2_env_launch", "solution", 2), "snapshot-step2-solution.pt");
  // The optional step 1b is step 1's program with another lesson: its files stay apart from step 1's.
  EXPECT_EQ(id("step1b_average_by_hand", "exercise", 1), "snapshot-step1b-exercise.pt");
  // Step 4's is a sharded snapshot's manifest; its shards take their names from it, so they stay apart too.
  EXPECT_EQ(id("step4_sharded", "exercise", 4), "snapshot-step4-exercise.pt");
  EXPECT_EQ(id("step4_sharded", "solution", 4), "snapshot-step4-solution.pt");
  EXPECT_EQ(id("ddp_train_bench", "program", -1), "snapshot-ddp_train_bench.pt");
  EXPECT_EQ(ddpw::default_snapshot_path({}), "snapshot.pt");
}

}  // namespace
