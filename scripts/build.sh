#!/usr/bin/env bash
# Configures (once) and builds everything into build/. Extra arguments go to the configure step,
# e.g. scripts/build.sh -DCMAKE_PREFIX_PATH=/path/to/libtorch.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$DDPW_ROOT"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$DDPW_BUILD/CMakeCache.txt" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$DDPW_BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$DDPW_BUILD" --parallel "$(nproc)"
