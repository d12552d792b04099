// defines: attempt (a step whose failure is kept as a ddp::Error instead of thrown) and agree (every
//          rank learns what any rank's step failed with, and all throw it together): so that a
//          collective operation in several steps (a snapshot, loading a state_dict on rank 0) stops on
//          every rank at the same point, naming the rank that failed, instead of leaving the others
//          waiting in the next collective.
#pragma once

#include <optional>
#include <string>

#include "ddp/error.h"
#include "ddp/process_group.h"

namespace ddp::detail {

template <typename F>
std::optional<Error> attempt(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    return Error(e.what());
  }
  return std::nullopt;
}

// Through the store (no tensor): "rank r: <what>" for each rank that failed, the first hint. A
// collective: all ranks call it, each with its own outcome.
void agree(ProcessGroup& pg, const std::optional<Error>& mine);

}  // namespace ddp::detail
