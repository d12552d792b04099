#include "ddp/detail/collective_trace.h"

#include <cstdio>
#include <exception>
#include <sstream>
#include <utility>

#include "ddp/detail/text.h"  // defines: shortened_list
#include "ddp/host.h"

namespace ddp {
namespace {

const std::string kTraceKey = "ddpw/trace/";

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string quoted(const TraceRecord& r) { return "#" + std::to_string(r.seq) + " '" + r.what + "'"; }

std::string ago(double now, double at) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f s before this report", now > at ? now - at : 0.0);
  return buf;
}

}  // namespace

// Tab-separated: the name comes last and may hold anything but a newline's meaning is kept.
std::string TraceRecord::encode() const {
  char at_text[32];
  std::snprintf(at_text, sizeof at_text, "%.3f", at);
  return std::to_string(seq) + "\t" + host + "\t" + at_text + "\t" + what;
}

std::optional<TraceRecord> TraceRecord::decode(const std::string& text) {
  const auto a = text.find('\t');
  const auto b = a == std::string::npos ? a : text.find('\t', a + 1);
  const auto c = b == std::string::npos ? b : text.find('\t', b + 1);
  if (c == std::string::npos) return std::nullopt;
  try {
    TraceRecord r;
    r.seq = std::stoll(text.substr(0, a));
    r.host = text.substr(a + 1, b - a - 1);
    r.at = std::stod(text.substr(b + 1, c - b - 1));
    r.what = text.substr(c + 1);
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string describe_other_ranks(int rank, const TraceRecord& mine, const std::vector<std::optional<TraceRecord>>& all,
                                 double now, size_t limit) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < all.size(); ++i) {
    if (static_cast<int>(i) == rank) continue;
    const std::string who = "rank " + std::to_string(i);
    const auto& r = all[i];
    if (!r) {
      lines.push_back(who + " never entered a collective of this group (or its record could not be read)");
      continue;
    }
    const std::string at = who + " @ " + r->host;
    if (r->seq < mine.seq)
      lines.push_back(at + " never arrived at " + quoted(mine) + ": its last was " + quoted(*r) + ", " +
                      ago(now, r->at));
    else if (r->seq > mine.seq)
      lines.push_back(at + " went on to " + quoted(*r) + " (this rank skipped collectives it called)");
    else if (r->what != mine.what)
      lines.push_back(at + " is at #" + std::to_string(r->seq) + " but in '" + r->what +
                      "' (the ranks call different collectives: one inside a rank guard?)");
  }
  std::string out = "this rank (" + std::to_string(rank) + ") is in " + quoted(mine) + "; ";
  if (lines.empty())
    return out +
           "every other rank entered it too (the collective itself stalled: a rank stopped inside it, or the "
           "network)";
  return out + detail::shortened_list(lines, limit, "; ", " ranks");
}

CollectiveTrace::CollectiveTrace(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                 std::chrono::milliseconds period)
    : store_(std::move(store)), rank_(rank), size_(size), period_(period), host_(host_name()) {
  last_.host = host_;
  thread_ = std::thread([this] { publish_loop(); });
}

CollectiveTrace::~CollectiveTrace() { stop(); }

void CollectiveTrace::entering(int64_t seq, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_.seq = seq;
  last_.what = what;
  last_.at = epoch_seconds();
  dirty_ = true;
}

void CollectiveTrace::publish(const TraceRecord& record) {
  const std::string text = record.encode();
  store_->set(kTraceKey + std::to_string(rank_), std::vector<uint8_t>(text.begin(), text.end()));
}

void CollectiveTrace::publish_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period_, [this] { return stopping_; });
    if (stopping_ || !dirty_) continue;
    const TraceRecord record = last_;
    dirty_ = false;
    lock.unlock();
    try {
      publish(record);
    } catch (const std::exception&) {
      // The store is gone (its server left): nothing more to keep. The group reports its own error.
      lock.lock();
      return;
    }
    lock.lock();
  }
}

void CollectiveTrace::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string CollectiveTrace::report() {
  try {
    TraceRecord mine;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      mine = last_;
    }
    publish(mine);  // the others' reports see where this rank is
    std::vector<std::optional<TraceRecord>> all(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      const std::string key = kTraceKey + std::to_string(r);
      if (!store_->check({key})) continue;
      const auto bytes = store_->get(key);
      all[static_cast<size_t>(r)] = TraceRecord::decode(std::string(bytes.begin(), bytes.end()));
    }
    return describe_other_ranks(rank_, mine, all, epoch_seconds());
  } catch (const std::exception&) {
    return "";  // the store is gone too: the error says what failed without the others' places
  }
}

}  // namespace ddp
