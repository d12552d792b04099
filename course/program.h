// defines: ProgramId and this_program() — which program of the course this executable is (step,
//          exercise or solution), from the compile definitions that ddpw_add_program (the top
//          CMakeLists.txt) gives each program target. A snapshot records it, so that another
//          program refuses the file, and the default snapshot path is the program's own.
#pragma once

#include <string>

namespace ddpw {

struct ProgramId {
  std::string name;   // the executable, e.g. "step2_env_launch" ("" outside a program target)
  std::string kind;   // "exercise", "solution" or "program" (step 0, the diagnostics, the benchmark)
  std::string about;  // the first line of its header comment: what --help says it is
  int step = -1;      // N of stepN_... (1 for the optional step1b_...), else -1

  // "step1b" of "step1b_average_by_hand", "step2" of "step2_env_launch": the step as its folder and
  // its TODO(...) blocks name it ("" outside a step).
  std::string step_tag() const { return step < 0 ? "" : name.substr(0, name.find('_')); }

  // "step2_env_launch (solution)", "step0_single_gpu", or "this program".
  std::string label() const {
    if (name.empty()) return "this program";
    return kind == "program" ? name : name + " (" + kind + ")";
  }
};

// Internal linkage on purpose: every translation unit reads the definitions of the target it is
// compiled for. The library calls nothing here; a program's own file calls it (through the default
// arguments of parse_options), so the answer is that program's.
namespace {

[[maybe_unused]] inline ProgramId this_program() {
  ProgramId p;
#ifdef DDPW_PROGRAM_NAME
  p.name = DDPW_PROGRAM_NAME;
  p.kind = DDPW_PROGRAM_KIND;
  p.about = DDPW_PROGRAM_ABOUT;
  if (p.name.rfind("step", 0) == 0 && p.name.size() > 4 && p.name[4] >= '0' && p.name[4] <= '9')
    p.step = p.name[4] - '0';
#endif
  return p;
}

}  // namespace

}  // namespace ddpw
