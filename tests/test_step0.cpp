// Step 0 end to end: it trains (the loss falls), writes its snapshot, and the snapshot loads into
// a plain model that reproduces the final test loss the program reported.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "course/models.h"
#include "course/options.h"
#include "course/workload.h"
#include "ddp/files.h"
#include "ddp/snapshot.h"

namespace {

std::vector<std::map<std::string, double>> read_csv(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  std::stringstream header(line);
  for (std::string field; std::getline(header, field, ',');) names.push_back(field);
  std::vector<std::map<std::string, double>> rows;
  while (std::getline(in, line)) {
    std::stringstream cells(line);
    std::map<std::string, double> row;
    size_t i = 0;
    for (std::string cell; std::getline(cells, cell, ',') && i < names.size(); ++i) row[names[i]] = std::stod(cell);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST(Step0, TrainsAndTheSnapshotLoadsIntoAPlainModel) {
  char tmp[] = "/tmp/ddpw-step0-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp), nullptr);
  const std::string dir = tmp, snapshot = dir + "/snapshot.pt", metrics = dir + "/metrics.csv";
  const std::string command = std::string(DDPW_BIN_DIR) + "/step0_single_gpu 6 3 --device cpu --threads 1 --snapshot " +
                              snapshot + " --metrics " + metrics + " > " + dir + "/out.log 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  const auto rows = read_csv(metrics);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_LT(rows.back().at("train_loss"), 0.5 * rows.front().at("train_loss")) << "the loss did not fall";

  // A plain model (no DDP, fresh weights) loads the snapshot and gets the reported test loss.
  ddpw::Options options;
  options.dataset = "synthetic";
  const ddpw::Workload workload = ddpw::make_workload(options);
  auto model = std::make_shared<ddpw::LinearRegressor>(20);
  ddp::load_model_weights(snapshot, *model);
  const auto eval = ddpw::evaluate(*model, workload, 1000, torch::kCPU, nullptr, 0, 1);
  EXPECT_NEAR(eval.loss, rows.back().at("test_loss"), 1e-5 * rows.back().at("test_loss"));
  ddp::remove_tree(dir);
}
