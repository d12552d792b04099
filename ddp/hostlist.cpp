#include "ddp/hostlist.h"

#include <cctype>
#include <charconv>
#include <optional>

#include "ddp/error.h"

namespace ddp {
namespace {

// No cluster has more nodes than this; a larger expansion is a typo, not a job.
constexpr size_t kMaxHosts = 1'000'000;

Error bad_hostlist(const std::string& list, const std::string& why) {
  return Error("cannot expand Slurm node list '" + list + "': " + why,
               "expected a list like 'node[01-04],gpu7' as in SLURM_JOB_NODELIST");
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// A decimal number that fits a long, or nothing (no exception for 99999999999999999999).
std::optional<long> to_long(const std::string& s) {
  long v = 0;
  const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (err != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Splits on commas that are not inside brackets.
std::vector<std::string> split_top_level(const std::string& s, const std::string& whole) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) throw bad_hostlist(whole, "unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) throw bad_hostlist(whole, "a '[' is never closed");
  parts.push_back(current);
  return parts;
}

// "001-003,7" -> {"001","002","003","7"}: the numbers as strings, padding preserved.
std::vector<std::string> expand_range_list(const std::string& body, const std::string& whole) {
  std::vector<std::string> out;
  for (const std::string& item : split_top_level(body, whole)) {
    const auto dash = item.find('-');
    if (dash == std::string::npos) {
      if (!all_digits(item)) throw bad_hostlist(whole, "'" + item + "' is not a number");
      out.push_back(item);
      continue;
    }
    const std::string lo = item.substr(0, dash), hi = item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) throw bad_hostlist(whole, "bad range '" + item + "'");
    const auto first = to_long(lo), last = to_long(hi);
    if (!first || !last) throw bad_hostlist(whole, "range '" + item + "' has a number too large");
    const long a = *first, b = *last;
    if (b < a) throw bad_hostlist(whole, "range '" + item + "' goes backwards");
    if (b - a > 100000) throw bad_hostlist(whole, "range '" + item + "' is implausibly large");
    const size_t width = lo.size();  // Slurm pads every number to the width of the lower bound
    for (long v = a; v <= b; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      out.push_back(n);
    }
  }
  return out;
}

// One host expression with any number of bracket groups: "r[1-2]n[1-2]-ib".
void expand_one(const std::string& expr, const std::string& whole, std::vector<std::string>& out) {
  const auto open = expr.find('[');
  if (open == std::string::npos) {
    if (expr.find(']') != std::string::npos) throw bad_hostlist(whole, "a ']' without '['");
    out.push_back(expr);
    return;
  }
  const auto close = expr.find(']', open);
  if (close == std::string::npos) throw bad_hostlist(whole, "a '[' is never closed");
  const std::string prefix = expr.substr(0, open);
  const std::string rest = expr.substr(close + 1);
  std::vector<std::string> tails;
  expand_one(rest, whole, tails);
  const auto numbers = expand_range_list(expr.substr(open + 1, close - open - 1), whole);
  if (numbers.size() * tails.size() > kMaxHosts - out.size())
    throw bad_hostlist(whole, "it expands to more than " + std::to_string(kMaxHosts) + " hosts");
  for (const std::string& n : numbers)
    for (const std::string& t : tails) out.push_back(prefix + n + t);
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& hostlist) {
  std::vector<std::string> hosts;
  if (hostlist.empty()) throw bad_hostlist(hostlist, "it is empty");
  for (const std::string& part : split_top_level(hostlist, hostlist)) {
    if (part.empty()) throw bad_hostlist(hostlist, "an empty entry between commas");
    expand_one(part, hostlist, hosts);
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& tasks_per_node) {
  const auto bad = [&](const std::string& why) {
    return Error("cannot read SLURM_TASKS_PER_NODE='" + tasks_per_node + "': " + why, "expected a list like '2(x3),1'");
  };
  std::vector<int> counts;
  if (tasks_per_node.empty()) throw bad("it is empty");
  size_t pos = 0;
  while (pos <= tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', pos);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string item = tasks_per_node.substr(pos, end - pos);
    std::string count = item, repeat = "1";
    const auto paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') throw bad("'" + item + "' has no closing ')'");
      count = item.substr(0, paren);
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(repeat)) throw bad("'" + item + "' is not N or N(xM)");
    const auto c = to_long(count), r = to_long(repeat);
    if (!c || !r || *c > 1'000'000) throw bad("'" + item + "' has a number too large");
    if (*c <= 0 || *r <= 0) throw bad("counts must be positive");
    if (static_cast<size_t>(*r) > kMaxHosts - counts.size())
      throw bad("it lists more than " + std::to_string(kMaxHosts) + " nodes");
    counts.insert(counts.end(), static_cast<size_t>(*r), static_cast<int>(*c));
    pos = end + 1;
  }
  return counts;
}

}  // namespace ddp
