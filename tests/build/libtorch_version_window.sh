#!/usr/bin/env bash
# The oldest LibTorch the course supports is the one CI tests (2.11). A LibTorch 1.x (Debian's
# libtorch-dev 1.13, which the README once named: its programs built, its tests did not) must stop
# the configure with the fix; an older 2.x must be built but with a warning that it is untested.
# LibTorch's CMake package is faked (a TorchConfig.cmake that only claims a version): the check
# runs right after find_package(Torch), before anything uses the package.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
fail() { echo "FAIL: $*"; exit 1; }
has() { tr -s ' \n' ' ' <"$1" | grep -F -- "$2" >/dev/null; }  # CMake wraps its messages
tmp=$(mktemp -d /tmp/ddpw-torchver.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

configure_with_torch() {  # configure_with_torch VERSION: exit code of a configure against a fake LibTorch VERSION
  local dir=$tmp/torch-$1
  mkdir -p "$dir"
  printf 'set(TORCH_LIBRARIES "")\nset(TORCH_INSTALL_PREFIX "%s")\nset(Torch_FOUND TRUE)\n' "$dir" >"$dir/TorchConfig.cmake"
  printf 'set(PACKAGE_VERSION "%s")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' "$1" >"$dir/TorchConfigVersion.cmake"
  cmake -S "$root" -B "$tmp/build-$1" -DTorch_DIR="$dir" -DDDPW_BUILD_TESTS=OFF >"$tmp/configure-$1.log" 2>&1
}

if configure_with_torch 1.13.1; then cat "$tmp/configure-1.13.1.log"; fail "LibTorch 1.13.1 was accepted"; fi
has "$tmp/configure-1.13.1.log" "LibTorch 1.13.1 (from explicit Torch_DIR/CMAKE_PREFIX_PATH) is not supported: the oldest LibTorch this course builds with is 2.11" \
  && has "$tmp/configure-1.13.1.log" "pip install torch==2.11.0 into a venv" \
  || { cat "$tmp/configure-1.13.1.log"; fail "LibTorch 1.13.1 was refused without the message naming the fix"; }
echo "ok: LibTorch 1.13.1 is refused: $(grep -m1 -o 'LibTorch 1.13.1 .*' "$tmp/configure-1.13.1.log")"

configure_with_torch 2.5.0 || true  # the fake package has no libraries: only the warning matters here
has "$tmp/configure-2.5.0.log" "LibTorch 2.5.0 (from explicit Torch_DIR/CMAKE_PREFIX_PATH) is older than 2.11, the oldest this course is tested with" \
  || { cat "$tmp/configure-2.5.0.log"; fail "an older LibTorch 2.x passed without the warning that it is untested"; }
if has "$tmp/configure-2.5.0.log" "is not supported"; then fail "LibTorch 2.5.0 was refused (it should only be warned about)"; fi
echo "ok: LibTorch 2.5.0 is built with a warning"
echo "PASS: the configure enforces the supported LibTorch window (>= 2.11 tested, older 2.x warned, 1.x refused)"
