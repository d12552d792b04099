// CollectiveTrace (collective_trace.h): a collective that fails names where the other ranks are.
//   * the sentence itself: a rank that never arrived (and what it last entered), one in another
//     collective, one past this rank, one without a record, all arrived, the limit;
//   * 2 CPU ranks over Gloo, a collective inside a rank guard: rank 0's extra allreduce is matched
//     by rank 1's next one (Gloo cannot tell them apart), then rank 0 waits alone and times out
//     (3 s): its error names rank 1, the collective it never arrived at and the one it entered
//     last, read from the store.
// The fault matrix (tests/faults/rank_killed.sh) checks the same on a real program whose rank is
// stopped or killed. CollectiveCheck.TheCheckAndTheTraceGiveACollectiveOneNumber: the check's
// numbers are the trace's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddp/detail/collective_check.h"
#include "ddp/detail/collective_trace.h"
#include "ddp/error.h"
#include "ddp/host.h"
#include "ddp/process_group.h"
#include "multiprocess.h"

namespace collective_trace_tests {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ddp::TraceRecord record(int64_t seq, const std::string& what, double at = 100) { return {seq, "node7", what, at}; }

TEST(CollectiveTrace, RecordsRoundTripThroughTheirText) {
  const ddp::TraceRecord r{42, "node7", "DDP's gradient allreduce\t(bucket 2)", 1234.5};
  const auto back = ddp::TraceRecord::decode(r.encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->seq, 42);
  EXPECT_EQ(back->host, "node7");
  EXPECT_EQ(back->what, r.what);
  EXPECT_DOUBLE_EQ(back->at, 1234.5);
  EXPECT_FALSE(ddp::TraceRecord::decode("garbage").has_value());
  EXPECT_FALSE(ddp::TraceRecord::decode("x\ty\tz\tw").has_value());
}

TEST(CollectiveTrace, NamesEachRankNotInThisCollective) {
  const auto mine = record(38, "stop agreement", 110);
  std::vector<std::optional<ddp::TraceRecord>> all{mine,
                                                   record(37, "DDP's gradient allreduce", 104.8),
                                                   record(38, "broadcast of the checkpoint"),
                                                   record(40, "stop agreement"),
                                                   std::nullopt,
                                                   record(38, "stop agreement")};
  const std::string text = ddp::describe_other_ranks(0, mine, all, 110);
  EXPECT_TRUE(contains(text, "this rank (0) is in #38 'stop agreement'")) << text;
  EXPECT_TRUE(contains(text,
                       "rank 1 @ node7 never arrived at #38 'stop agreement': its last was #37 'DDP's gradient "
                       "allreduce', 5.2 s before this report"))
      << text;
  EXPECT_TRUE(contains(text,
                       "rank 2 @ node7 is at #38 but in 'broadcast of the checkpoint' (the ranks call different "
                       "collectives"))
      << text;
  EXPECT_TRUE(contains(text, "rank 3 @ node7 went on to #40 'stop agreement'")) << text;
  EXPECT_TRUE(contains(text, "rank 4 never entered a collective of this group")) << text;
  EXPECT_FALSE(contains(text, "rank 5")) << text;  // it is where this rank is

  EXPECT_TRUE(contains(ddp::describe_other_ranks(0, mine, all, 110, 2), "; and 2 more ranks"));
}

TEST(CollectiveTrace, AllRanksHereSaysTheCollectiveItselfStalled) {
  const auto mine = record(5, "barrier");
  const std::string text = ddp::describe_other_ranks(1, mine, {mine, mine, mine}, 100);
  EXPECT_TRUE(contains(text, "this rank (1) is in #5 'barrier'; every other rank entered it too")) << text;
}

// Rank 0 calls an allreduce that rank 1 does not (a collective inside `if (rank == 0)`).
TEST(CollectiveTrace, ATimeoutNamesTheRankThatNeverArrived) {
  const int rc = ddp_test::run_ranks(
      2,
      [](int rank, std::shared_ptr<ddp::ProcessGroup> pg) {
        auto t = torch::ones({1});
        if (rank == 1) {
          pg->allreduce_sum(t, "the epoch's end");  // matched by rank 0's guarded allreduce
          // Stay in the group (its record in the store) until rank 0 has checked its error.
          pg->store().wait({"test/checked"}, std::chrono::seconds(60));
          return 0;
        }
        pg->allreduce_sum(t, "rank 0's guarded allreduce");
        std::string message;
        const auto start = std::chrono::steady_clock::now();
        try {
          pg->allreduce_sum(t, "the epoch's end");
        } catch (const ddp::Error& e) {
          message = e.what();
        }
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        pg->store().set("test/checked", std::vector<uint8_t>{1});
        std::printf("[rank 0] after %.1f s: %s\n", took, message.c_str());
        const std::string expected = "rank 1 @ " + ddp::host_name() +
                                     " never arrived at #3 'the epoch's end': its last was #2 'the epoch's end'";
        const bool named = contains(message, "failed on rank 0 of 2") &&
                           contains(message, "this rank (0) is in #3 'the epoch's end'") && contains(message, expected);
        return named && took < 10 ? 0 : 1;
      },
      std::chrono::seconds(3));
  EXPECT_EQ(rc, 0);
}

// ---- the wrapper forwards every c10d::Backend virtual (review finding 9) ----------------------

namespace {

// Records each virtual that reaches it; returns a work of its own (or nothing) where one is due.
class RecordingBackend : public c10d::Backend {
 public:
  RecordingBackend() : c10d::Backend(0, 1) {}
  mutable std::vector<std::string> calls;
  c10::intrusive_ptr<c10d::Work> work(const std::string& name) const {
    calls.push_back(name);
    return c10::make_intrusive<c10d::Work>();
  }
  void note(const std::string& name) const { calls.push_back(name); }

  const std::string getBackendName() const override { return "recording"; }
  bool supportsSplitting() const override { return note("supportsSplitting"), true; }
  bool supportsCoalescing() const override { return note("supportsCoalescing"), true; }
  bool supportsTimeEstimation() const override { return note("supportsTimeEstimation"), true; }
  bool supportsShrinking() const override { return note("supportsShrinking"), true; }
  bool supportsTensorAlloc(c10::DeviceIndex) override { return note("supportsTensorAlloc"), true; }
  c10::intrusive_ptr<Backend> shrink(const std::vector<int64_t>&, int, const c10::intrusive_ptr<Options>&) override {
    return note("shrink"), nullptr;
  }
  c10::intrusive_ptr<Backend> split(const c10::intrusive_ptr<c10d::Store>&, const std::vector<int>&,
                                    const c10::intrusive_ptr<Options>&) override {
    return note("split"), nullptr;
  }
  c10::intrusive_ptr<Backend> merge(const c10::intrusive_ptr<c10d::Store>&, const c10::intrusive_ptr<Options>&,
                                    const int&, const int&) override {
    return note("merge"), nullptr;
  }
  void setTimeout(std::chrono::milliseconds) override { note("setTimeout"); }
  void startCoalescing() override { note("startCoalescing"); }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override { return work("endCoalescing"); }
  c10::intrusive_ptr<Options> getBackendOptions() override {
    return note("getBackendOptions"), c10::make_intrusive<Options>("recording");
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>&, const c10d::BroadcastOptions&) override {
    return work("broadcast");
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    return work("allreduce");
  }
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    return work("allreduce_sparse");
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>&,
                                                     const c10d::AllreduceCoalescedOptions&) override {
    return work("allreduce_coalesced");
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>&, const c10d::ReduceOptions&) override {
    return work("reduce");
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
                                           const c10d::AllgatherOptions&) override {
    return work("allgather");
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor&, at::Tensor&, const c10d::AllgatherOptions&) override {
    return work("_allgather_base");
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
                                                     const c10d::AllgatherOptions&) override {
    return work("allgather_coalesced");
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>&, std::vector<at::Tensor>&,
                                                                 const c10d::AllgatherOptions&) override {
    return work("allgather_into_tensor_coalesced");
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
                                        const c10d::GatherOptions&) override {
    return work("gather");
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&,
                                         const c10d::ScatterOptions&) override {
    return work("scatter");
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&,
                                                const c10d::ReduceScatterOptions&) override {
    return work("reduce_scatter");
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor&, at::Tensor&,
                                                      const c10d::ReduceScatterOptions&) override {
    return work("_reduce_scatter_base");
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>&, std::vector<at::Tensor>&,
                                                                 const c10d::ReduceScatterOptions&) override {
    return work("reduce_scatter_tensor_coalesced");
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor&, at::Tensor&, std::vector<int64_t>&, std::vector<int64_t>&,
                                               const c10d::AllToAllOptions&) override {
    return work("alltoall_base");
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>&, std::vector<at::Tensor>&,
                                          const c10d::AllToAllOptions&) override {
    return work("alltoall");
  }
  void monitoredBarrier(const c10d::BarrierOptions&, bool) override { note("monitoredBarrier"); }
  void setSequenceNumberForGroup() override { note("setSequenceNumberForGroup"); }
  uint64_t getSequenceNumberForGroup() override { return note("getSequenceNumberForGroup"), 7; }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>&, int, int) override { return work("send"); }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>&, int, int) override { return work("recv"); }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override { return work("recvAnysource"); }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override { return work("barrier"); }
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&&) override {
    note("registerOnCompletionHook");
  }
  void waitForPendingWorks() override { note("waitForPendingWorks"); }
  void enableCollectivesTiming() override { note("enableCollectivesTiming"); }
  void setGroupUid(const std::string& uid) override {
    c10d::Backend::setGroupUid(uid);
    note("setGroupUid");
  }
  void eagerConnectSingleDevice(at::Device) override { note("eagerConnectSingleDevice"); }
  c10d::ErrorType getError() override { return note("getError"), c10d::ErrorType::COMM_ERROR; }
  std::shared_ptr<c10::Allocator> getMemAllocator() override { return note("getMemAllocator"), nullptr; }
  at::Tensor allocateTensor(long size, at::TensorOptions options) override {  // NOLINT(google-runtime-int)
    return note("allocateTensor"), torch::empty({size}, options);
  }
  void abort() override { note("abort"); }
  void shutdown() override { note("shutdown"); }
};

}  // namespace

// A user's pg.backend().X() reaches c10d's backend for every virtual of c10d::Backend (torch 2.11's
// list), not the base class's silent no-op (abort, shutdown, eager connect) or its "does not support".
TEST(CollectiveCheck, TheWrapperPassesEveryBackendCallToTheBackendItWraps) {
  auto inner = c10::make_intrusive<RecordingBackend>();
  ddp::CheckedBackend::Hooks hooks;
  hooks.fail = [](const std::string& what, double, const std::string& why) { throw ddp::Error(what + ": " + why); };
  auto wrapper = c10::make_intrusive<ddp::CheckedBackend>(inner, nullptr, std::chrono::seconds(5), "here", hooks);
  c10d::Backend& b = *wrapper;  // through the base class, as a user holding pg.backend() calls it
  std::vector<at::Tensor> ts{torch::ones({2})}, ts2{torch::ones({2})};
  std::vector<std::vector<at::Tensor>> lists{{torch::ones({2})}};
  at::Tensor one = torch::ones({2}), two = torch::ones({2});
  std::vector<int64_t> splits;
  std::vector<std::string> expected;
  auto call = [&](const std::string& name, const std::function<void()>& f) {
    expected.push_back(name);
    f();
  };
  call("supportsSplitting", [&] { EXPECT_TRUE(b.supportsSplitting()); });
  call("supportsCoalescing", [&] { EXPECT_TRUE(b.supportsCoalescing()); });
  call("supportsTimeEstimation", [&] { EXPECT_TRUE(b.supportsTimeEstimation()); });
  call("supportsShrinking", [&] { EXPECT_TRUE(b.supportsShrinking()); });
  call("supportsTensorAlloc", [&] { EXPECT_TRUE(b.supportsTensorAlloc(0)); });
  call("shrink", [&] { b.shrink({1}); });
  call("split", [&] { b.split(nullptr, {0}, nullptr); });
  call("merge", [&] { b.merge(nullptr, nullptr, 0, 1); });
  call("setTimeout", [&] { b.setTimeout(std::chrono::seconds(3)); });
  call("startCoalescing", [&] { b.startCoalescing(); });
  call("endCoalescing", [&] { EXPECT_TRUE(b.endCoalescing()); });
  call("getBackendOptions", [&] { EXPECT_EQ(b.getBackendOptions()->backend, "recording"); });
  call("broadcast", [&] { b.broadcast(ts); });
  call("allreduce", [&] { b.allreduce(ts); });
  call("allreduce_sparse", [&] { b.allreduce_sparse(ts); });
  call("allreduce_coalesced", [&] { b.allreduce_coalesced(ts); });
  call("reduce", [&] { b.reduce(ts); });
  call("allgather", [&] { b.allgather(lists, ts); });
  call("_allgather_base", [&] { b._allgather_base(one, two); });
  call("allgather_coalesced", [&] { b.allgather_coalesced(lists, ts); });
  call("allgather_into_tensor_coalesced", [&] { b.allgather_into_tensor_coalesced(ts, ts2); });
  call("gather", [&] { b.gather(lists, ts); });
  call("scatter", [&] { b.scatter(ts, lists); });
  call("reduce_scatter", [&] { b.reduce_scatter(ts, lists); });
  call("_reduce_scatter_base", [&] { b._reduce_scatter_base(one, two); });
  call("reduce_scatter_tensor_coalesced", [&] { b.reduce_scatter_tensor_coalesced(ts, ts2); });
  call("alltoall_base", [&] { b.alltoall_base(one, two, splits, splits); });
  call("alltoall", [&] { b.alltoall(ts, ts2); });
  call("monitoredBarrier", [&] { b.monitoredBarrier(c10d::BarrierOptions(), true); });
  call("setSequenceNumberForGroup", [&] { b.setSequenceNumberForGroup(); });
  call("getSequenceNumberForGroup", [&] { EXPECT_EQ(b.getSequenceNumberForGroup(), 7u); });
  call("send", [&] { b.send(ts, 0, 1); });
  call("recv", [&] { b.recv(ts, 0, 1); });
  call("recvAnysource", [&] { b.recvAnysource(ts, 1); });
  call("barrier", [&] { b.barrier(); });
  call("registerOnCompletionHook", [&] { b.registerOnCompletionHook([](std::shared_ptr<c10d::WorkInfo>) {}); });
  call("waitForPendingWorks", [&] { b.waitForPendingWorks(); });
  call("enableCollectivesTiming", [&] { b.enableCollectivesTiming(); });
  call("setGroupUid", [&] { b.setGroupUid("g7"); });
  call("eagerConnectSingleDevice", [&] { b.eagerConnectSingleDevice(at::Device(at::kCPU)); });
  call("getError", [&] { EXPECT_EQ(b.getError(), c10d::ErrorType::COMM_ERROR); });
  call("getMemAllocator", [&] { b.getMemAllocator(); });
  call("allocateTensor", [&] { EXPECT_EQ(b.allocateTensor(3).numel(), 3); });
  call("abort", [&] { b.abort(); });
  call("shutdown", [&] { b.shutdown(); });
  EXPECT_EQ(inner->calls, expected);
  EXPECT_EQ(b.getBackendName(), "recording");
  EXPECT_EQ(b.getGroupUid(), "g7");
  EXPECT_EQ(inner->getGroupUid(), "g7");
  // The collectives among them were numbered (the 16 collective ops, the monitored barrier and the barrier);
  // endCoalescing's work is filed under the block's last number, the point-to-point calls under none.
  EXPECT_EQ(wrapper->issued(), 18);
}

}  // namespace collective_trace_tests

// The collective check (collective_check.h, ProcessGroupOptions::check_collectives): ranks that
// call different collectives all stop at once, each naming every rank's call.
namespace collective_check_tests {

using collective_trace_tests::contains;

ddp::CallPrint print(int64_t seq, const std::string& call) {
  ddp::CallPrint p;
  p.seq = seq;
  p.host = "node7";
  p.call = call;
  p.hash = std::hash<std::string>()(call);
  return p;
}

TEST(CollectiveCheck, FingerprintsRoundTripAndAMismatchNamesEachRanksCall) {
  const auto back = ddp::CallPrint::decode(print(7, "barrier").encode().data(), ddp::CallPrint::kBytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->seq, 7);
  EXPECT_EQ(back->host, "node7");
  EXPECT_EQ(back->call, "barrier");

  const auto same = print(7, "allreduce (sum) of float32 [1234]");
  EXPECT_EQ(ddp::describe_mismatch(7, {same, same, same}), "");
  const std::string text =
      ddp::describe_mismatch(7, {same, print(7, "broadcast from rank 0 of float32 [10]"), same, same});
  EXPECT_EQ(text,
            "collective 7 differs across ranks: ranks 0, 2, 3 (rank 0 @ node7): allreduce (sum) of float32 [1234]; "
            "rank 1 @ node7: broadcast from rank 0 of float32 [10]");
}

TEST(CollectiveCheck, DescribesTensorsByDtypeAndShape) {
  EXPECT_EQ(ddp::describe_tensors({torch::zeros({2, 3})}), "float32 [2, 3]");
  EXPECT_EQ(ddp::describe_tensors({torch::zeros({1}, torch::kInt64), torch::zeros({4}, torch::kFloat64)}),
            "int64 [1], float64 [4]");
  std::vector<torch::Tensor> many(6, torch::zeros({5}));
  EXPECT_EQ(ddp::describe_tensors(many), "float32 [5], float32 [5], float32 [5], ... (6 tensors)");
}

// n CPU ranks over Gloo with the check on (`on`) or left to the environment.
int run_checked(bool on, const std::function<int(int rank, ddp::ProcessGroup& pg)>& body,
                const std::string& phase = "") {
  return ddp_test::run_processes(
      2,
      [&](int rank, const ddp::LaunchEnv& launch) {
        ddp::ProcessGroupOptions options;
        options.backend = "gloo";
        options.rendezvous_timeout = options.collective_timeout = std::chrono::seconds(30);
        options.check_collectives = on;
        auto pg = ddp::init_process_group(launch, torch::Device(torch::kCPU), options);
        return body(rank, *pg);
      },
      phase);
}

// Runs `call`; the ddp::Error it throws (its text and hint), and how long it took.
struct Caught {
  std::string text, hint;
  double took = 0;
};
Caught catch_error(const std::function<void()>& call) {
  Caught c;
  const auto start = std::chrono::steady_clock::now();
  try {
    call();
  } catch (const ddp::Error& e) {
    c.text = e.what();
    c.hint = e.hint();
  }
  c.took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

// The rank-0 guard mistake: rank 0 broadcasts what rank 1 never does; rank 1 goes on to the
// epoch's allreduce. Unchecked, Gloo would pair the two (or hang until the 30 s timeout).
TEST(CollectiveCheck, ABroadcastInsideARankZeroGuardStopsEveryRankAtOnceNamingBothCalls) {
  const int rc = run_checked(true, [](int rank, ddp::ProcessGroup& pg) {
    const Caught c = catch_error([&] {
      if (rank == 0) {
        std::vector<torch::Tensor> weights{torch::ones({10})};
        pg.broadcast(weights, 0, "rank 0's checkpoint broadcast");
      }
      auto loss = torch::ones({1234});
      pg.allreduce_sum(loss, "the epoch's loss");
    });
    std::printf("[rank %d] after %.2f s: %s (fix: %s)\n", rank, c.took, c.text.c_str(), c.hint.c_str());
    const std::string host = ddp::host_name();
    // Collective 1 is the group's first barrier; 2 is where the ranks part.
    const bool named = contains(c.text, "collective 2 differs across ranks: ") &&
                       contains(c.text, "rank 0 @ " + host + ": broadcast from rank 0 of float32 [10]") &&
                       contains(c.text, "rank 1 @ " + host + ": allreduce (sum) of float32 [1234]") &&
                       contains(c.hint, "rank guard");
    return named && c.took < 10 ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}

// Same op, different dtype and size, issued through backend() as DDP and ZeRO do.
TEST(CollectiveCheck, DifferentDtypesOrSizesStopEveryRankNamingBoth) {
  const int rc = run_checked(true, [](int rank, ddp::ProcessGroup& pg) {
    const Caught c = catch_error([&] {
      std::vector<torch::Tensor> grads{rank == 0 ? torch::ones({3}) : torch::ones({4}, torch::kFloat64)};
      c10d::AllreduceOptions sum;
      pg.wait(pg.backend().allreduce(grads, sum), "gradient allreduce");
    });
    std::printf("[rank %d] after %.2f s: %s\n", rank, c.took, c.text.c_str());
    const bool named = contains(c.text, "rank 0 @ " + ddp::host_name() + ": allreduce (sum) of float32 [3]") &&
                       contains(c.text, "rank 1 @ " + ddp::host_name() + ": allreduce (sum) of float64 [4]");
    return named && c.took < 10 ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}

// Matching collectives pass with the check on (here switched on as in PyTorch, by the
// environment) and give what they give without it; each was checked.
TEST(CollectiveCheck, MatchingCollectivesPassWithTheSameResults) {
  const auto body = [](int rank, ddp::ProcessGroup& pg) {
    auto sum = torch::full({5}, static_cast<float>(rank + 1));
    pg.allreduce_sum(sum);
    std::vector<torch::Tensor> from_one{torch::full({2, 2}, static_cast<double>(rank))};
    pg.broadcast(from_one, 1);
    auto flat = torch::empty({4}, torch::kInt64);
    auto mine = torch::full({2}, static_cast<int64_t>(rank * 10));
    pg.wait(pg.backend()._allgather_base(flat, mine), "allgather");
    pg.barrier();
    const bool right = torch::equal(sum, torch::full({5}, 3.0f)) &&
                       torch::equal(from_one[0], torch::ones({2, 2}, torch::kFloat64)) &&
                       torch::equal(flat, torch::tensor({0, 0, 10, 10}, torch::kInt64));
    // Numbered either way (the join's barrier and these four); checked only when asked.
    const auto* numbered = dynamic_cast<ddp::CheckedBackend*>(&pg.backend());
    const bool as_asked = numbered && numbered->checking() == pg.checks_collectives() && numbered->issued() == 5 &&
                          numbered->checked() == (pg.checks_collectives() ? 5 : 0);
    return right && as_asked ? 0 : 1;
  };
  EXPECT_EQ(run_checked(false, body, "off"), 0);
  ::setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL", 1);
  const int rc = run_checked(
      false, [&](int rank, ddp::ProcessGroup& pg) { return pg.checks_collectives() ? body(rank, pg) : 1; }, "on");
  ::unsetenv("TORCH_DISTRIBUTED_DEBUG");
  EXPECT_EQ(rc, 0);
}

// One number per collective for the check and the trace (the group's count of the collectives it
// issued): with the check on, rank 0 calls a collective rank 1 never does and fails in its check,
// whose "collective 5" is the trace's "#5"; rank 1's last record is the collective it waited for
// last, under the number it was issued with (#3: the first of two allreduces, waited in reverse).
TEST(CollectiveCheck, TheCheckAndTheTraceGiveACollectiveOneNumber) {
  const int rc = ddp_test::run_processes(2, [](int rank, const ddp::LaunchEnv& launch) {
    ddp::ProcessGroupOptions options;
    options.backend = "gloo";
    options.rendezvous_timeout = std::chrono::seconds(30);
    options.collective_timeout = std::chrono::seconds(1);  // rank 0's check waits this long for rank 1
    options.check_collectives = true;
    auto pg = ddp::init_process_group(launch, torch::Device(torch::kCPU), options);  // #1: the joining barrier
    auto loss = torch::ones({1});
    pg->allreduce_sum(loss, "the loss");  // #2
    std::vector<torch::Tensor> first{torch::ones({3})}, second{torch::ones({4})};
    auto first_work = pg->allreduce_sum_async(first);    // #3
    auto second_work = pg->allreduce_sum_async(second);  // #4
    pg->wait(second_work, "the second bucket");
    pg->wait(first_work, "the first bucket");
    if (rank == 1) {  // stays in the group (its record in the store) until rank 0 has its error
      pg->store().wait({"test/checked"}, std::chrono::seconds(60));
      return 0;
    }
    const Caught c = catch_error([&] { pg->allreduce_sum(loss, "rank 0's guarded allreduce"); });  // #5
    pg->store().set("test/checked", std::vector<uint8_t>{1});
    std::printf("[rank 0] after %.2f s: %s\n", c.took, c.text.c_str());
    const std::string check = "the collective check of allreduce (sum) of float32 [1]";
    const bool numbered = contains(c.text, "the collective check before collective 5 (") &&
                          contains(c.text, "this rank (0) is in #5 '" + check + "'") &&
                          contains(c.text, "rank 1 @ " + ddp::host_name() + " never arrived at #5 '" + check +
                                               "': its last was #3 'the first bucket'");
    return numbered && c.took < 10 ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}

}  // namespace collective_check_tests
