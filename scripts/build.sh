#!/usr/bin/env bash
# Configures (once) and builds everything into build/. Extra arguments go to the configure step,
# e.g. scripts/build.sh -DCMAKE_PREFIX_PATH=/path/to/libtorch.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$DDPW_ROOT"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Configure when there is no finished configure yet (a failed one leaves a cache but no build
# files: building would then fail with "build.ninja not found" instead of the configure's error).
if [ ! -f "$DDPW_BUILD/CMakeCache.txt" ] || { [ ! -f "$DDPW_BUILD/build.ninja" ] && [ ! -f "$DDPW_BUILD/Makefile" ]; } \
   || [ $# -gt 0 ]; then
  cmake -S . -B "$DDPW_BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$DDPW_BUILD" --parallel "$(nproc)"
