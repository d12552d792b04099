#include "ddp/detail/agreement.h"

#include <set>

namespace ddp::detail {

// Messages travel as "what\nhint"; the same message from several ranks is said once, naming the first.
void agree(ProcessGroup& pg, const std::optional<Error>& mine) {
  const auto all = pg.all_gather_strings(mine ? mine->message() + "\n" + mine->hint() : "ok");
  std::string what, hint;
  std::set<std::string> seen;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == "ok") continue;
    const auto cut = all[r].find('\n');
    const std::string w = all[r].substr(0, cut);
    if (!seen.insert(w).second) continue;
    what += (what.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + w;
    if (hint.empty() && cut != std::string::npos) hint = all[r].substr(cut + 1);
  }
  if (!what.empty()) throw Error(what, hint);
}

}  // namespace ddp::detail
