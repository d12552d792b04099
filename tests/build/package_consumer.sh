#!/usr/bin/env bash
# The library as a LibTorch user gets it. `cmake --install` puts this build's library under a
# temporary prefix (the library only: no course/, no CLI11); examples/train_ddp, a project of its
# own, finds it with find_package(ddpw). Two tests run this script:
#   build.package_consumer (no argument): builds train_single (plain LibTorch) and train_ddp (the
#     same loop made distributed); train_single trains, and train_ddp runs under torchrun with 2
#     ranks on the CPU (Gloo): both ranks end with the same weights, near train_single's. The
#     example finds Torch first; a second project that finds ddpw first is configured too.
#   build.installed_headers_alone (--headers): each installed public header (include/ddp/*.h; not
#     include/ddp/detail/, the insides they include) compiles alone (-fsyntax-only), as
#     tests/build/headers_alone/ checks it; and the public headers are the ones docs/library.md
#     documents, while it documents no detail/ header as API.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
build=${DDPW_BUILD_DIR:?DDPW_BUILD_DIR must be the build folder}
torch_dir=${DDPW_TORCH_DIR:?DDPW_TORCH_DIR must be the Torch_DIR of the build}
mode=${1:-consumer}
VENV_BIN=${DDPW_HOME:-$HOME/.cache/ddp-workshop}/venv/bin
[ -d "$VENV_BIN" ] && PATH=$PATH:$VENV_BIN
fail() { echo "FAIL: $*" >&2; exit 1; }
show_fail() { tail -n 40 "$1" >&2; fail "$2 (log: the lines above)"; }
work=$(mktemp -d /tmp/ddpw-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM  # a timeout (ctest's) still removes the folder
cd "$work"

start=$(date +%s)
cmake --install "$build" --prefix "$work/prefix" >install.log 2>&1 || show_fail install.log "cmake --install"
[ -f prefix/lib/cmake/ddpw/ddpwConfig.cmake ] && [ -f prefix/lib/cmake/ddpw/ddpwConfigVersion.cmake ] ||
  fail "no ddpwConfig.cmake / ddpwConfigVersion.cmake under lib/cmake/ddpw"
[ -f prefix/include/ddp/distributed_data_parallel.h ] && [ -f prefix/include/ddp/config.h ] ||
  fail "the headers (and the generated ddp/config.h) are not under include/ddp"
[ ! -e prefix/include/course ] || fail "the course's scaffolding was installed"
if grep -rlE 'CLI/|nlohmann|fmt/' prefix/include >/dev/null; then
  fail "an installed header includes CLI11, nlohmann-json or fmt: $(grep -rlE 'CLI/|nlohmann|fmt/' prefix/include)"
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
project=$root/examples/train_ddp build_type=Release compiler=()
# The headers are only checked (-fsyntax-only): no code, so no optimization; the precompiled
# <torch/torch.h> then builds in three quarters of the time (34 s of a core instead of 44).
# By Clang where it is installed (scripts/setup.sh installs it for the tests): a header compiled
# alone is the same check with either front end, and Clang's precompiled header keeps LibTorch's
# template instances (PCH_INSTANTIATE_TEMPLATES, CMake's default), where GCC instantiates them again
# at the end of every file: ~2 s of a core a header instead of ~7, the header itself ~23 s instead of 39.
if [ "$mode" = --headers ]; then
  project=$root/tests/build/headers_alone build_type=None
  if command -v clang++ >/dev/null; then compiler=(-DCMAKE_CXX_COMPILER=clang++); fi
fi
cmake -S "$project" -B consumer "${generator[@]}" -DCMAKE_BUILD_TYPE=$build_type ${compiler[@]+"${compiler[@]}"} \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DTorch_DIR="$torch_dir" >configure.log 2>&1 ||
  show_fail configure.log "the consumer's configure (find_package(ddpw))"

if [ "$mode" = --headers ]; then
  undocumented=() documented_detail=()
  for header in prefix/include/ddp/*.h; do
    name=ddp/$(basename "$header")
    grep -qF "\`$name\`" "$root/docs/library.md" || undocumented+=("$name")
  done
  for header in prefix/include/ddp/detail/*.h; do
    name=ddp/detail/$(basename "$header")
    ! grep -qF "**\`$name\`**" "$root/docs/library.md" || documented_detail+=("$name")
  done
  [ ${#undocumented[@]} -eq 0 ] || fail "installed public headers that docs/library.md does not list: ${undocumented[*]}" \
    "(document them there, or move them to ddp/detail/ if a user never includes them)"
  [ ${#documented_detail[@]} -eq 0 ] || fail "docs/library.md lists internal headers as API: ${documented_detail[*]}" \
    "(a user never includes ddp/detail/: document the public header that uses them)"
  [ -d prefix/include/ddp/detail ] || fail "include/ddp/detail/ was not installed (the public headers include it)"
  grep -o 'headers alone: .*' configure.log
  cmake --build consumer --parallel "$(nproc)" >build.log 2>&1 ||
    show_fail build.log "an installed header does not compile alone"
  count=$(find prefix/include/ddp -maxdepth 1 -name '*.h' | wc -l)
  echo "PASS: each of the $count public installed headers compiles alone ($(sed -n 's/^-- The CXX compiler identification is //p' configure.log))," \
       "and docs/library.md lists them (and no detail/ header), $(( $(date +%s) - start )) s"
  exit 0
fi

# Either order of find_package: examples/train_ddp finds Torch first (built and run below); this
# project finds ddpw first, with C++20 set for the whole project as many do (configured only, while
# the first one builds: the same sources, one build).
mkdir ddpw_first
cat >ddpw_first/CMakeLists.txt <<EOF
cmake_minimum_required(VERSION 3.21)
project(ddpw_first LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(ddpw 0.1 CONFIG REQUIRED)
find_package(Torch REQUIRED)
add_executable(train_ddp "$project/train_ddp.cpp")
target_link_libraries(train_ddp PRIVATE ddpw::ddp)
EOF
cmake -S ddpw_first -B ddpw_first/build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DTorch_DIR="$torch_dir" >configure_ddpw_first.log 2>&1 &
other_order=$!
cmake --build consumer --parallel "$(nproc)" >build.log 2>&1 || show_fail build.log "the consumer's build"
wait "$other_order" || show_fail configure_ddpw_first.log "the configure of a project that finds ddpw before Torch"
echo "installed, configured (Torch first, and ddpw first) and built the consumer in $(( $(date +%s) - start )) s"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it in its venv)"

timeout 120 consumer/train_single >single.log 2>&1 || show_fail single.log "train_single"
grep -q '^final weights checksum' single.log || show_fail single.log "train_single printed no checksum"

export CUDA_VISIBLE_DEVICES=  # the CPU and Gloo, as CI
timeout --kill-after=10 180 torchrun --standalone --nproc_per_node=2 --no-python consumer/train_ddp \
  >ddp.log 2>&1 || show_fail ddp.log "train_ddp under torchrun (2 ranks)"
lines=$(grep -cE '^rank [01] final weights checksum' ddp.log || true)
[ "$lines" -eq 2 ] || show_fail ddp.log "expected a checksum line from each of the 2 ranks, got $lines"
sums=$(grep -E '^rank [01] final weights checksum' ddp.log | awk '{print $NF}' | sort -u)
[ "$(echo "$sums" | wc -l)" -eq 1 ] || show_fail ddp.log "the ranks ended with different weights: $sums"
grep -q '^epoch 4:' ddp.log || show_fail ddp.log "rank 0 printed no epoch lines"

# Equal weights prove nothing if nothing trained. Both programs learn y = x·w + 0.5 with w evenly
# spaced from -1 to 1, whose weights' checksum is 70.5 (sum of k·w_k for k = 1..20, plus the bias);
# the initial weights' is near 0. Each rank takes 16 samples a step, 32 in all as train_single:
# the same training on another shuffle, so it ends near train_single's weights (measured: 70.05
# against 69.83) and its loss falls as train_single's does.
single=$(awk '/^final weights checksum/ {print $NF}' single.log)
loss() { awk -v e="$2" '$1 == "epoch" && $2 == e":" {print $NF}' "$1"; }
awk -v s="$single" -v d="$sums" -v s0="$(loss single.log 0)" -v s4="$(loss single.log 4)" \
    -v d0="$(loss ddp.log 0)" -v d4="$(loss ddp.log 4)" 'BEGIN {
  abs_s = s - 70.5; if (abs_s < 0) abs_s = -abs_s
  gap = d - s; if (gap < 0) gap = -gap
  exit !(abs_s < 2 && gap < 1 && s4 < s0 / 4 && d4 < d0 / 4)
}' || fail "train_ddp did not train as train_single does: checksums $sums (2 ranks) against $single (one" \
           "process; the target's: 70.5); first and last epoch's loss $(loss ddp.log 0), $(loss ddp.log 4) against" \
           "$(loss single.log 0), $(loss single.log 4)"
echo "PASS: find_package(ddpw) from a temporary prefix; train_ddp under torchrun: 2 ranks, equal weights" \
     "(checksum $sums, one process: $single; loss $(loss ddp.log 0) -> $(loss ddp.log 4)); $(( $(date +%s) - start )) s in all"
