#!/usr/bin/env bash
# One CUDA stack per process. (1) A configure whose nccl.h claims another NCCL than the one LibTorch
# was built with (as after `module load nccl` of another version: NCCL_HOME points at it) must stop
# and say which module to unload or load. (2) ddpw_check_cuda_stack, the check the configure calls,
# must stop on a CUDA toolkit of another major version than LibTorch's, and on a libnccl of another
# version loaded through LD_LIBRARY_PATH, and pass when everything matches.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
torch_dir=${DDPW_TORCH_DIR:?DDPW_TORCH_DIR must be the Torch_DIR of the build}
fail() { echo "FAIL: $*"; exit 1; }
# CMake wraps its messages: match against the log as one line, runs of spaces squeezed.
has() { tr -s ' \n' ' ' <"$1" | grep -F -- "$2" >/dev/null; }  # no -q: under pipefail an early exit of grep fails tr
tmp=$(mktemp -d /tmp/ddpw-cudastack.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# (2) the check itself, with versions as the configure finds them
check() {  # check TORCH_NCCL HEADER_NCCL LOADED_NCCL TORCH_CUDA TOOLKIT_CUDA
  cat >"$tmp/check.cmake" <<CMAKE
include("$root/cmake/CudaStack.cmake")
ddpw_check_cuda_stack(TORCH_NCCL "$1" HEADER_NCCL "$2" HEADER_DIR /opt/nccl/include LOADED_NCCL "$3"
                      TORCH_CUDA "$4" TOOLKIT_CUDA "$5" TOOLKIT_DIR /opt/cuda/bin)
CMAKE
  cmake -P "$tmp/check.cmake" >"$tmp/check.log" 2>&1
}
check 2.28.9 2.28.3 2.28.9 13.0 13.0.88 || { cat "$tmp/check.log"; fail "a matching stack (patch versions may differ) was refused"; }
check 2.28.9 2.28.9 "" 13.0 "" || { cat "$tmp/check.log"; fail "unknown versions must not stop the configure"; }
if check 2.28.9 2.28.9 2.28.9 13.0 12.4.131; then fail "a CUDA 12 toolkit with a CUDA 13 LibTorch was accepted"; fi
has "$tmp/check.log" 'two CUDAs: the CUDA toolkit in /opt/cuda/bin is 12.4.131, but LibTorch uses CUDA 13.0' \
  && has "$tmp/check.log" 'module unload cuda and module load the cuda module of version 13.x' \
  || { cat "$tmp/check.log"; fail "the CUDA mismatch message does not say which module to load"; }
if check 2.28.9 2.28.9 2.21.5 13.0 13.0; then fail "a libnccl 2.21 loaded by LibTorch built with 2.28 was accepted"; fi
has "$tmp/check.log" 'loads libnccl 2.21.5' && has "$tmp/check.log" 'module unload nccl' \
  || { cat "$tmp/check.log"; fail "the loaded-NCCL mismatch message does not say which module to unload"; }
echo "ok: ddpw_check_cuda_stack accepts a matching stack and names the module for a CUDA or libnccl mismatch"

# (1) a real configure against this build's LibTorch, with an NCCL module's header that claims 2.18
torch_prefix=$(cd "$torch_dir/../../.." && pwd)
[ -f "$torch_prefix/lib/libtorch_cuda.so" ] || { echo "SKIP: this build's LibTorch has no CUDA"; exit 77; }
mkdir -p "$tmp/nccl-2.18/include"
printf '#define NCCL_MAJOR 2\n#define NCCL_MINOR 18\n#define NCCL_PATCH 5\n#define NCCL_SUFFIX ""\n' >"$tmp/nccl-2.18/include/nccl.h"
rc=0
NCCL_HOME="$tmp/nccl-2.18" cmake -S "$root" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$torch_prefix/share/cmake" \
  -DDDPW_BUILD_TESTS=OFF >"$tmp/configure.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || { cat "$tmp/configure.log"; fail "the configure accepted nccl.h of NCCL 2.18 with a LibTorch built with another NCCL"; }
has "$tmp/configure.log" "two NCCLs: $tmp/nccl-2.18/include/nccl.h is NCCL 2.18.5, but LibTorch was built with NCCL" \
  && has "$tmp/configure.log" 'module unload nccl' \
  || { cat "$tmp/configure.log"; fail "the configure stopped without naming the two NCCLs and the module to unload"; }
sed -n '/two NCCLs/,/build folder/p' "$tmp/configure.log"
echo "PASS: the configure stops on an nccl.h or CUDA toolkit that is not LibTorch's, naming the module to fix"
