// BucketSchedule on its own, without a process group: real backward passes over three leaf
// tensors, the engine's steps replaced by a log. The chain loss = sum(((a * 2) * b) * c) makes
// autograd report the gradients in the order c, b, a.
//   * buckets complete out of order and are still sent strictly in bucket order;
//   * no_sync: no step at all, then a synced pass as usual;
//   * a parameter without a gradient: an error naming it after the sent buckets were waited for,
//     or (fill_missing) put into its bucket by put_missing;
//   * an abandoned pass: forgotten if nothing was sent, an out-of-step error if something was,
//     and the pass after that works.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddp/detail/bucket_schedule.h"  // defines: BucketSchedule, NoSync
#include "ddp/error.h"                   // defines: Error

namespace {

using Log = std::vector<std::string>;

// The schedule over a, b, c with the given buckets; every step only writes to `log`.
struct Engine {
  explicit Engine(const std::vector<std::vector<size_t>>& buckets, bool fill_missing = false) {
    for (int i = 0; i < 3; ++i) params.push_back(torch::ones({2}, torch::requires_grad()));
    schedule = std::make_unique<ddp::BucketSchedule>(
        params, std::vector<std::string>{"a", "b", "c"}, buckets,
        ddp::BucketSchedule::Steps{
            .start = [this] { log.push_back("start"); },
            .put =
                [this](size_t i, size_t k, size_t slot) {
                  log.push_back("put " + std::string(1, static_cast<char>('a' + i)) + " in " + std::to_string(k) + "." +
                                std::to_string(slot));
                },
            .launch = [this](size_t k) { log.push_back("launch " + std::to_string(k)); },
            .wait_for_sent =
                [this](size_t sent, bool interrupted) {
                  log.push_back("wait for " + std::to_string(sent) + (interrupted ? " interrupted" : ""));
                },
            .finish =
                [this, fill_missing] {
                  log.push_back("finish");
                  if (fill_missing) schedule->put_missing();
                },
        },
        ddp::BucketSchedule::Settings{
            .engine = "TestEngine", .unused_hint = "use them", .fill_missing = fill_missing, .rank = 3});
  }
  // loss = sum(((a * 2) * b) * c); `use_a` false: b and c only; `fail` throws between b and a.
  torch::Tensor loss(bool use_a = true, bool fail = false) {
    auto x = use_a ? params[0] * 2 : torch::full({2}, 2.0);
    if (fail) x.register_hook([](torch::Tensor) -> torch::Tensor { throw std::runtime_error("injected failure"); });
    return (x * params[1] * params[2]).sum();
  }
  Log take() { return std::exchange(log, {}); }

  std::vector<torch::Tensor> params;
  Log log;
  std::unique_ptr<ddp::BucketSchedule> schedule;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(BucketSchedule, BucketsAreSentInBucketOrderWhenTheLaterOneCompletesFirst) {
  Engine e({{0}, {1, 2}});                // bucket 1 (b, c) completes before bucket 0 (a)
  for (int pass = 0; pass < 2; ++pass) {  // the counts start afresh each pass
    e.loss().backward();
    EXPECT_EQ(e.take(),
              (Log{"start", "put c in 1.1", "put b in 1.0", "put a in 0.0", "launch 0", "launch 1", "finish"}));
  }
  EXPECT_FALSE(e.schedule->in_backward());
}

TEST(BucketSchedule, NoSyncTakesNoStepThenTheNextPassSyncs) {
  Engine e({{2}, {1}, {0}});
  {
    ddp::NoSync quiet(*e.schedule);
    EXPECT_FALSE(e.schedule->requires_gradient_sync());
    e.loss().backward();
    EXPECT_TRUE(e.take().empty());
  }
  EXPECT_TRUE(e.schedule->requires_gradient_sync());
  e.loss().backward();
  EXPECT_EQ(e.take(), (Log{"start", "put c in 0.0", "launch 0", "put b in 1.0", "launch 1", "put a in 2.0", "launch 2",
                           "finish"}));
}

TEST(BucketSchedule, ParameterWithoutGradientIsNamedAfterTheSentBucketsAreWaitedFor) {
  Engine e({{2}, {0, 1}});
  const std::string error = error_of([&] { e.loss(/*use_a=*/false).backward(); });
  EXPECT_NE(error.find("received no gradient in this backward pass: a"), std::string::npos) << error;
  EXPECT_EQ(e.take(), (Log{"start", "put c in 0.0", "launch 0", "put b in 1.1", "wait for 1"}));
  e.loss().backward();  // the next pass starts afresh
  EXPECT_EQ(e.take(), (Log{"start", "put c in 0.0", "launch 0", "put b in 1.1", "put a in 1.0", "launch 1", "finish"}));
}

TEST(BucketSchedule, FillMissingPutsTheParametersWithoutGradientThenSendsTheirBuckets) {
  Engine e({{2}, {0, 1}}, /*fill_missing=*/true);
  e.loss(/*use_a=*/false).backward();
  EXPECT_EQ(e.take(), (Log{"start", "put c in 0.0", "launch 0", "put b in 1.1", "finish", "put a in 1.0", "launch 1"}));
}

TEST(BucketSchedule, AbandonedPassWithNothingSentIsForgotten) {
  Engine e({{0}, {1, 2}});  // b and c are in before the failure, but bucket 0 is not
  EXPECT_NE(error_of([&] { e.loss(true, /*fail=*/true).backward(); }).find("injected failure"), std::string::npos);
  EXPECT_EQ(e.take(), (Log{"start", "put c in 1.1", "put b in 1.0"}));
  EXPECT_TRUE(e.schedule->in_backward());  // the end never came
  e.loss().backward();
  EXPECT_EQ(e.take(), (Log{"wait for 0 interrupted", "start", "put c in 1.1", "put b in 1.0", "put a in 0.0",
                           "launch 0", "launch 1", "finish"}));
}

TEST(BucketSchedule, AbandonedPassAfterBucketsWereSentIsAnOutOfStepError) {
  Engine e({{2}, {1}, {0}});
  EXPECT_NE(error_of([&] { e.loss(true, /*fail=*/true).backward(); }).find("injected failure"), std::string::npos);
  EXPECT_EQ(e.take(), (Log{"start", "put c in 0.0", "launch 0", "put b in 1.0", "launch 1"}));
  const std::string error = error_of([&] { e.loss().backward(); });
  EXPECT_NE(error.find("a backward pass on rank 3 ended part-way, after 2 of 3 gradient buckets had been sent"),
            std::string::npos)
      << error;
  EXPECT_EQ(e.take(), (Log{"wait for 2 interrupted"}));
  e.loss().backward();  // the pass after the error works
  EXPECT_EQ(e.take(), (Log{"start", "put c in 0.0", "launch 0", "put b in 1.0", "launch 1", "put a in 2.0", "launch 2",
                           "finish"}));
}

}  // namespace
