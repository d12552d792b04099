#!/usr/bin/env bash
# The LibTorch versions the library builds with: 2.10 to 2.15 (cmake/LibTorch.cmake). Outside that
# window the configure stops naming the window and the fix (the set-up's DDPW_TORCH): an older
# release (2.9.1; 1.x, Debian's libtorch-dev 1.13 that the README once named, takes the same branch)
# and a newer one (2.16.0); at its edges (2.10.0, and 2.15.1: a patch release) it goes on. The
# installed package's config (ddpwConfig.cmake) refuses the same window. LibTorch's CMake package is
# faked (a TorchConfig.cmake that only claims a version): the check runs right after
# find_package(Torch), before anything uses the package.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
fail() { echo "FAIL: $*"; exit 1; }
has() { tr -s ' \n' ' ' <"$1" | grep -F -- "$2" >/dev/null; }  # CMake wraps its messages
tmp=$(mktemp -d /tmp/ddpw-torchver.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

fake_torch() {  # fake_torch VERSION: a folder with a TorchConfig.cmake of that version
  local dir=$tmp/torch-$1
  mkdir -p "$dir"
  printf 'set(TORCH_LIBRARIES "")\nset(TORCH_INSTALL_PREFIX "%s")\nset(Torch_FOUND TRUE)\n' "$dir" >"$dir/TorchConfig.cmake"
  printf 'set(PACKAGE_VERSION "%s")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' "$1" >"$dir/TorchConfigVersion.cmake"
  echo "$dir"
}
configure_with_torch() {  # configure_with_torch VERSION: exit code of a configure against a fake LibTorch VERSION
  cmake -S "$root" -B "$tmp/build-$1" -DTorch_DIR="$(fake_torch "$1")" -DDDPW_BUILD_TESTS=OFF >"$tmp/configure-$1.log" 2>&1
}

for version in 2.9.1:older 2.16.0:newer; do
  v=${version%:*} side=${version#*:}
  if configure_with_torch "$v"; then cat "$tmp/configure-$v.log"; fail "LibTorch $v was accepted"; fi
  edge=2.10 && [ "$side" = older ] || edge=2.15
  has "$tmp/configure-$v.log" "LibTorch $v (from explicit Torch_DIR/CMAKE_PREFIX_PATH) is $side than $edge" \
    && has "$tmp/configure-$v.log" "(torch 2.10 to 2.15)" && has "$tmp/configure-$v.log" "DDPW_TORCH=2.15.0 scripts/setup.sh" \
    || { cat "$tmp/configure-$v.log"; fail "LibTorch $v was refused without the message naming the window and the fix"; }
  echo "ok: LibTorch $v is refused: $(tr -s ' \n' ' ' <"$tmp/configure-$v.log" | grep -m1 -o "LibTorch $v [^:]*")"
done
for v in 2.10.0 2.15.1; do
  configure_with_torch "$v" || true  # the fake package has no libraries: only the window's verdict matters here
  has "$tmp/configure-$v.log" "ddp-workshop: LibTorch $v from explicit Torch_DIR" \
    || { cat "$tmp/configure-$v.log"; fail "LibTorch $v (inside the window) did not get past the version check"; }
  echo "ok: LibTorch $v passes the version check"
done

# The package's config: a project that finds LibTorch 2.16.0 is told the window, not only "rebuild ddpw".
mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.21)
project(consumer LANGUAGES CXX)
include(CMakePackageConfigHelpers)
set(DDPW_OLDEST_TORCH 2.10)
set(DDPW_NEWEST_TORCH 2.15)
set(DDPW_TORCH_VERSION 2.15.0)
set(Torch_DIR "$(fake_torch 2.16.0)")
configure_package_config_file("$root/cmake/ddpwConfig.cmake.in" "\${CMAKE_BINARY_DIR}/pkg/ddpwConfig.cmake" INSTALL_DESTINATION pkg)
file(COPY "$root/cmake/TorchCudaSetup.cmake" DESTINATION "\${CMAKE_BINARY_DIR}/pkg")
find_package(ddpw CONFIG PATHS "\${CMAKE_BINARY_DIR}/pkg" NO_DEFAULT_PATH)
if(ddpw_FOUND)
  message(FATAL_ERROR "ddpw was found beside LibTorch 2.16.0")
endif()
CMAKE
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" >"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "the consumer's configure failed"; }
has "$tmp/consumer.log" "found LibTorch 2.16.0" && has "$tmp/consumer.log" "outside the versions ddpw builds with (torch 2.10 to 2.15)" \
  || { cat "$tmp/consumer.log"; fail "the package's config did not refuse LibTorch 2.16.0 naming the window"; }
echo "ok: the package's config refuses LibTorch 2.16.0: $(tr -s ' \n' ' ' <"$tmp/consumer.log" | grep -o 'found LibTorch 2.16.0[^.]*')"
echo "PASS: the configure and the package's config enforce the LibTorch window (2.10 to 2.15; older and newer refused)"
