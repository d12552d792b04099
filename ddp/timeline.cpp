#include "ddp/timeline.h"

#include <ATen/core/ivalue.h>      // defines: c10::ivalue::Future (a Work's completion)
#include <ATen/record_function.h>  // defines: RecordFunction callbacks (autograd nodes)

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>  // defines: the trace's JSON
#include <optional>

#include "ddp/config.h"  // defines: DDPW_HAVE_CUDA
#include "ddp/error.h"
#include "ddp/files.h"

#ifdef DDPW_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

namespace ddp {
namespace {

using Json = nlohmann::json;
constexpr const char* kCollectiveLane = "collectives";

struct Span {
  std::string name, category, lane;  // lane: "thread N", "collectives" or the caller's
  int64_t start_ns, end_ns;          // steady clock since its epoch
  int64_t bytes = -1;                // collectives: what they reduce
};

// Never destroyed: a backend's thread may complete a collective while the process exits.
struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<Span> spans;
  size_t max_spans = 0;
  int64_t dropped = 0;
  int rank = 0;
  std::optional<at::CallbackHandle> callback;
};
Recorder& recorder() {
  static auto* r = new Recorder;
  return *r;
}

int64_t ns(TimelineClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string thread_lane() {
  static std::atomic<int> next{0};
  thread_local const std::string lane = "thread " + std::to_string(++next);
  return lane;
}

void add(Span span) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.spans.size() >= r.max_spans) {
    ++r.dropped;
    return;
  }
  r.spans.push_back(std::move(span));
}

struct NodeStart : at::ObserverContext {
  TimelineClock::time_point start = TimelineClock::now();
};

std::unique_ptr<at::ObserverContext> on_node_start(const at::RecordFunction& /*fn*/) {
  if (!timeline_on()) return nullptr;
  return std::make_unique<NodeStart>();
}

void on_node_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  const auto* start = dynamic_cast<const NodeStart*>(context);
  if (!start || !timeline_on()) return;
  add({fn.name(), "backward", thread_lane(), ns(start->start), ns(TimelineClock::now())});
}

// Spans of a lane that may overlap (collectives in flight together) go to sub-lanes "lane",
// "lane 2", ... so that each lane's spans follow one another, as a trace viewer draws them.
std::vector<std::string> split_overlapping(const std::vector<Span>& spans, const std::string& lane) {
  std::vector<size_t> order;
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i].lane == lane) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a].start_ns < spans[b].start_ns; });
  std::vector<std::string> sub(spans.size());
  std::vector<int64_t> free_at;  // per sub-lane: when its last span ends
  for (size_t i : order) {
    size_t k = 0;
    while (k < free_at.size() && free_at[k] > spans[i].start_ns) ++k;
    if (k == free_at.size()) free_at.push_back(0);
    free_at[k] = spans[i].end_ns;
    sub[i] = k == 0 ? lane : lane + " " + std::to_string(k + 1);
  }
  return sub;
}

}  // namespace

void start_timeline(const TimelineOptions& options) {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.rank = options.rank;
    r.max_spans = options.max_spans;
    if (options.backward_nodes && !r.callback)
      r.callback = at::addGlobalCallback(at::RecordFunctionCallback(&on_node_start, &on_node_end)
                                             .scopes({at::RecordScope::BACKWARD_FUNCTION})
                                             .needsInputs(false)
                                             .needsIds(false));
  }
  thread_lane();  // the starting thread is "thread 1"
  r.on.store(true);
}

void stop_timeline() {
  Recorder& r = recorder();
  r.on.store(false);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.callback) at::removeCallback(*r.callback);
  r.callback.reset();
}

bool timeline_on() { return recorder().on.load(std::memory_order_relaxed); }

TimelineScope::TimelineScope(const char* name, const char* category)
    : name_(name), category_(category), on_(timeline_on()) {
  if (on_) start_ = TimelineClock::now();
}

TimelineScope::~TimelineScope() {
  if (on_ && timeline_on()) add({name_, category_, thread_lane(), ns(start_), ns(TimelineClock::now())});
}

void record_timeline_span(const std::string& name, const std::string& category, const std::string& lane,
                          TimelineClock::time_point start, TimelineClock::time_point end) {
  if (!timeline_on()) return;
  add({name, category, lane.empty() ? thread_lane() : lane, ns(start), ns(end)});
}

namespace {

// Whether this thread's current CUDA stream is being captured into a CUDA graph.
bool stream_is_capturing() {
#ifdef DDPW_HAVE_CUDA
  return c10::cuda::device_count() > 0 &&
         c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
#else
  return false;
#endif
}

}  // namespace

// Nothing is recorded while a CUDA graph captures: the capture runs nothing (the replays run the
// collective, and no host code sees them), and a callback there may not touch a stream.
void record_collective(const c10::intrusive_ptr<c10d::Work>& work, const std::string& name, int64_t bytes) {
  if (!work || !timeline_on() || stream_is_capturing()) return;
  const int64_t start = ns(TimelineClock::now());
  c10::intrusive_ptr<c10::ivalue::Future> future;
  try {
    future = work->getFuture();
  } catch (const std::exception&) {  // a backend without futures: the span cannot end, so none
  }
  if (!future) return;
  // Runs on the backend's thread when the collective completes (at once if it already has).
  // uses_future = false: the callback never reads the result, so the future need not make a stream
  // of LibTorch's pool wait for it and record the outputs on that stream (NCCL's own callbacks skip
  // it too): with it, every record cost a stream fork and a recordStream per collective.
  future->addCallback(
      [name, bytes, start](c10::ivalue::Future& /*done*/) {
        if (!timeline_on()) return;
        try {
          add({name, "collective", kCollectiveLane, start, ns(TimelineClock::now()), bytes});
        } catch (...) {  // out of memory: the span is lost, the collective is not
        }
      },
      /*uses_future=*/false);
}

std::string timeline_events(bool clear) {
  Recorder& r = recorder();
  std::vector<Span> spans;
  int64_t dropped = 0;
  int rank = 0;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    spans = r.spans;
    dropped = r.dropped;
    rank = r.rank;
    if (clear) {
      r.spans.clear();
      r.dropped = 0;
    }
  }
  const std::vector<std::string> sub = split_overlapping(spans, kCollectiveLane);
  // Lane ids: the caller's named lanes first (in order of appearance), then threads, then collectives.
  std::map<std::string, std::pair<int, int>> lanes;  // name -> (tid, sort index)
  int named = 0;
  auto lane_of = [&](size_t i) -> const std::string& { return sub[i].empty() ? spans[i].lane : sub[i]; };
  for (size_t i = 0; i < spans.size(); ++i) {
    const std::string& lane = lane_of(i);
    if (lanes.count(lane)) continue;
    int tid = 0;
    if (lane.rfind("thread ", 0) == 0)
      tid = 100 + std::stoi(lane.substr(7));
    else if (lane.rfind(kCollectiveLane, 0) == 0)
      tid = 1000 + (lane == kCollectiveLane ? 1 : std::stoi(lane.substr(lane.rfind(' ') + 1)));
    else
      tid = 1 + named++;
    lanes[lane] = {tid, tid};
  }
  Json events = Json::array();
  // Metadata events: the names and the order a viewer shows the rank and its lanes in.
  auto meta = [&](const char* what, Json args, std::optional<int> tid = std::nullopt) {
    Json e = {{"ph", "M"}, {"name", what}, {"pid", rank}, {"args", std::move(args)}};
    if (tid) e["tid"] = *tid;
    events.push_back(std::move(e));
  };
  meta("process_name", {{"name", "rank " + std::to_string(rank)}});
  meta("process_sort_index", {{"sort_index", rank}});
  if (dropped > 0) meta("process_labels", {{"labels", std::to_string(dropped) + " spans dropped (over max_spans)"}});
  for (const auto& [name, ids] : lanes) {
    meta("thread_name", {{"name", name}}, ids.first);
    meta("thread_sort_index", {{"sort_index", ids.second}}, ids.first);
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    Json e = {{"ph", "X"},
              {"name", s.name},
              {"cat", s.category},
              {"pid", rank},
              {"tid", lanes[lane_of(i)].first},
              {"ts", static_cast<double>(s.start_ns) / 1e3},
              {"dur", static_cast<double>(std::max<int64_t>(0, s.end_ns - s.start_ns)) / 1e3}};
    if (s.bytes >= 0) e["args"] = {{"bytes", s.bytes}};
    events.push_back(std::move(e));
  }
  return events.dump();
}

void write_chrome_trace(const std::string& path, const std::vector<std::string>& events_per_rank,
                        const std::string& about, const std::string& option) {
  Json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", Json::array()}};
  trace["otherData"] = {{"about", about},
                        {"clock", "steady clock (CLOCK_MONOTONIC), microseconds; ranks on one host share it"}};
  for (size_t r = 0; r < events_per_rank.size(); ++r) {
    Json events;
    try {
      events = Json::parse(events_per_rank[r]);
    } catch (const Json::exception& e) {
      throw InternalError("the timeline of rank " + std::to_string(r) + " is not JSON: " + e.what(), __FILE__,
                          __LINE__);
    }
    for (auto& e : events) trace["traceEvents"].push_back(std::move(e));
  }
  write_file_atomically(path, trace.dump() + "\n", option);
}

}  // namespace ddp
