#!/usr/bin/env bash
# Configures (once) and builds into build/: everything, or only the targets after --targets (what
# scripts/course runs first, what scripts/check-step checks). Other arguments go to the configure
# step, e.g. scripts/build.sh -DCMAKE_PREFIX_PATH=/path/to/libtorch.
#   scripts/build.sh [CONFIGURE ARGUMENTS...] [--targets TARGET...]
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$DDPW_ROOT"
configure_args=() targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = --targets ]; then shift; targets=("$@"); break; fi
  configure_args+=("$1"); shift
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
