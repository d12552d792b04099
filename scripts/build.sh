#!/usr/bin/env bash
# Configures (once) and builds into build/: everything (scripts/test: the tests too), only what a
# learner needs (--course), or only the targets after --targets (what scripts/check-step checks).
# Other arguments go to the configure step, e.g. scripts/build.sh -DCMAKE_PREFIX_PATH=/path/to/libtorch.
#   scripts/build.sh [CONFIGURE ARGUMENTS...] [--course | --targets TARGET...]
#   --course   the library, the course's scaffolding, every step's exercise and its solution (what
#              scripts/check-step runs): no tests, no benchmarks. README's Set-up line for learners;
#              a later scripts/test builds the rest in the same folder.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$DDPW_ROOT"
configure_args=() targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --targets) shift; targets=("$@"); break ;;
    --course)
      shift
      # Every step folder's program and, where solutions/ holds it, its solution (step 0 has none);
      # they pull in the library (ddp) and the scaffolding (ddpw_course) they link.
      for dir in step[0-9]*_*/; do
        step=${dir%/}
        [ -f "$step/main.cpp" ] || continue
        targets+=("$step")
        [ ! -f "solutions/$step/main.cpp" ] || targets+=("solution_$step")
      done
      [ ${#targets[@]} -gt 0 ] || { echo "build.sh: no step folders (step*_*/main.cpp) in $DDPW_ROOT" >&2; exit 2; }
      [ $# -eq 0 ] || { echo "build.sh: --course takes nothing after it (configure arguments go before it)" >&2; exit 2; }
      ;;
    *) configure_args+=("$1"); shift ;;
  esac
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Configure when there is no finished configure yet (a failed one leaves a cache but no build
# files: building would then fail with "build.ninja not found" instead of the configure's error).
if [ ! -f "$DDPW_BUILD/CMakeCache.txt" ] || { [ ! -f "$DDPW_BUILD/build.ninja" ] && [ ! -f "$DDPW_BUILD/Makefile" ]; } \
   || [ ${#configure_args[@]} -gt 0 ]; then
  cmake -S . -B "$DDPW_BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ${configure_args[@]+"${configure_args[@]}"}
fi
cmake --build "$DDPW_BUILD" --parallel "$(nproc)" ${targets[@]+--target "${targets[@]}"}
