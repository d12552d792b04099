#!/usr/bin/env bash
# The sites' clusters/<site>/env.sh under a real module system (Debian's Lmod) whose module trees
# mirror the names and versions each site's SOURCES.md lists (tests/slurm/site-modulefiles.sh), then
# the project's own configure, CUDA/NCCL stack check included. Here the only LibTorch is the set-up's torch 2.11 with
# CUDA 13.0 and the only toolkit CUDA 13.0, so:
#   1. every site's default (its torch build, e.g. cu126 for V100s): env.sh loads, loads no NCCL
#      module, loads a toolkit with a version (an unversioned one would get the tree's CUDA 11
#      default), and that toolkit's CUDA major is the build's: the configure's own check
#      (ddpw_check_cuda_stack) with the two versions accepts it. The modules of CUDA 12 have no
#      nvcc here: this part is the check's logic on the versions, not a configure.
#   2. every site with DDPW_TORCH_CUDA=cu130, the build this machine has: the toolkit module of
#      CUDA 13 is this machine's toolkit, the torch module or venv is the set-up's torch; the
#      project configures (the stack check passes for real). For Delta (module reset, a torch
#      module that loads NCCL's network plugin itself, the reset's CUDA 13 toolkit), step 2's compile and link commands are
#      those of this machine's build folder (DDPW_BUILD_DIR, which CI builds and tests), or, with
#      none to compare with, step 2 is built and run.
#   3. jobs (DDPW_MODULES=run) load no toolkit of another CUDA major; Delta's NCCL network plugin
#      comes with pytorch-conda/2.12 (cu130), and with your own cu128 torch loads in jobs only.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
torch_dir=${DDPW_TORCH_DIR:?DDPW_TORCH_DIR must be the Torch_DIR of the build}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
lmod_init=/usr/share/lmod/lmod/init/bash
[ -f "$lmod_init" ] || fail "Lmod is not installed (apt-get install lmod; scripts/setup.sh installs it)"
torch_prefix=$(cd "$torch_dir/../../.." && pwd)  # <prefix>/share/cmake/Torch
venv=${torch_prefix%/lib/python*/site-packages/torch}
[ "$venv" != "$torch_prefix" ] && [ -x "$venv/bin/python3" ] || skip "LibTorch is not a venv's torch ($torch_prefix): the sites' venvs cannot be stood in for"
[ -x /usr/local/cuda/bin/nvcc ] || skip "no CUDA toolkit in /usr/local/cuda: a CUDA 13 toolkit module has nothing to load"
[ -f "$torch_prefix/lib/libtorch_cuda.so" ] || skip "this LibTorch has no CUDA: no stack to check"
! grep -q '^#define DDPW_CPU_ONLY_BECAUSE' "${DDPW_BUILD_DIR:?}/include/ddp/config.h" 2>/dev/null ||
  skip "a CPU-only build (DDPW_OTHER_CUDA_TOOLKIT: LibTorch's CUDA is not the toolkit's): no stack to check"
sites=(della delta hipergator puhti roihu supercloud)
unset DDPW_TORCH_CUDA DDPW_MODULES   # each env.sh's own default first

tmp=$(mktemp -d /tmp/ddpw-modules.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/slurm/site-modulefiles.sh
source "$root/tests/slurm/site-modulefiles.sh"
# One tree per site, of the module names its SOURCES.md lists (not of env.sh's). Where a site's
# table names no CUDA 13 toolkit version (only "the newest 13.x", cuda/13), the tree adds this
# machine's (cuda/13.0, cudatoolkit/13.0): what that request would find at a site that has one.
for site in "${sites[@]}"; do
  site_modulefiles "$tmp/modulefiles-$site" "$venv/bin" "$site" +cuda/13.0 +cudatoolkit/13.0
done

# No NCCL module and no toolkit without a version, in any env.sh (its role lines, read as
# lint.site_sources reads them).
bad=$(python3 - "$root" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/tests/lint")
import site_sources
for env in sorted(Path(sys.argv[1]).glob("clusters/*/env.sh")):
    for line, name in site_sources.module_names(env):
        if "nccl" in name and not name.startswith("aws-ofi-nccl/"):
            print(f"{env}:{line}: an NCCL module: {name}")
        if name in ("cuda", "cudatoolkit"):
            print(f"{env}:{line}: a CUDA toolkit without a version: {name}")
PY
)
[ -z "$bad" ] || { echo "$bad"; fail "an env.sh loads an NCCL module (LibTorch brings its own) or a toolkit without a version"; }

# in_site SITE MODE SCRIPT: a fresh bash with Lmod and the tree, env.sh sourced (MODE: build or run,
# as a job loads it), then SCRIPT; output to $tmp/SITE.MODE.log.
in_site() {
  local site=$1 mode=$2 script=$3 modules=all
  [ "$mode" = run ] && modules=run
  # shellcheck disable=SC2016  # expanded by the inner shell
  env -i HOME="$HOME" PATH=/usr/local/bin:/usr/bin:/bin LMOD_SYSTEM_DEFAULT_MODULES=cudatoolkit/26.5_13.2 \
    DDPW_VENV="$venv" DDPW_MODULES=$modules ${DDPW_TORCH_CUDA:+DDPW_TORCH_CUDA=$DDPW_TORCH_CUDA} \
    bash -c 'source "$1" && export MODULEPATH="$2" && cd "$3" && source "clusters/$4/env.sh" && eval "$5"' \
    _ "$lmod_init" "$tmp/modulefiles-$site" "$root" "$site" "$script" >"$tmp/$site.$mode.log" 2>&1
}
major() { echo "${1%%.*}"; }
check_stack() {  # check_stack TORCH_CUDA TOOLKIT_CUDA: the configure's check, on these versions
  printf 'include("%s/cmake/CudaStack.cmake")\nddpw_check_cuda_stack(TORCH_CUDA "%s" TOOLKIT_CUDA "%s" TOOLKIT_DIR module)\n' \
    "$root" "$1" "$2" >"$tmp/check.cmake"
  cmake -P "$tmp/check.cmake" >"$tmp/check.log" 2>&1
}

# ---- 1. each site's default build
# shellcheck disable=SC2016  # expanded in the site's shell
report='echo "BUILD=$DDPW_TORCH_CUDA TOOLKIT=${DDPW_TEST_TOOLKIT:-none} JOBMODULE=${DDPW_TEST_JOB_MODULE:-none} LOADED=$LOADEDMODULES"'
for site in "${sites[@]}"; do
  in_site "$site" build "$report" || { cat "$tmp/$site.build.log"; fail "$site: env.sh did not load (default build)"; }
  line=$(grep '^BUILD=' "$tmp/$site.build.log")
  build=$(sed -E 's/^BUILD=([^ ]*).*/\1/' <<<"$line") toolkit=$(sed -E 's/.* TOOLKIT=([^ ]*).*/\1/' <<<"$line")
  case $build in cu126) torch_cuda=12.6 ;; cu128) torch_cuda=12.8 ;; cu130) torch_cuda=13.0 ;; *) fail "$site: DDPW_TORCH_CUDA=$build" ;; esac
  [[ ":${line##*LOADED=}:" != *:nccl/* ]] || fail "$site: an NCCL module was loaded: $line"   # (aws-ofi-nccl: its network plugin)
  [ "$toolkit" != none ] || fail "$site: no CUDA toolkit module was loaded: $line"
  [ "$(major "$toolkit")" != 11 ] || fail "$site: the toolkit is the CUDA 11 default (a line without a version): $line"
  check_stack "$torch_cuda" "$toolkit" || { cat "$tmp/check.log"; fail "$site: the configure's check refuses its default: torch $build, toolkit $toolkit"; }
  echo "ok: $site: default torch build $build, toolkit CUDA $toolkit (the configure's check accepts them); modules: ${line##*LOADED=}"
done

# ---- 2. every site on this machine's build (cu130): the configure, the stack check for real
for site in "${sites[@]}"; do
  prefix=()
  case $site in puhti|roihu) prefix=(-DCMAKE_PREFIX_PATH="$torch_prefix/share/cmake") ;; esac   # their LibTorch archive
  start=$SECONDS
  DDPW_TORCH_CUDA=cu130 in_site "$site" build \
    "$report; command -v nvcc; cmake -S . -B '$tmp/build-$site' -G Ninja -DDDPW_BUILD_TESTS=OFF ${prefix[*]}" ||
    { cat "$tmp/$site.build.log"; fail "$site: env.sh or the configure failed with DDPW_TORCH_CUDA=cu130"; }
  log=$tmp/$site.build.log
  grep -qx "$(readlink -f /usr/local/cuda/bin/nvcc)\|/usr/local/cuda/bin/nvcc" "$log" || { cat "$log"; fail "$site: nvcc is not the CUDA 13 toolkit module's"; }
  grep -q 'ddp-workshop: NCCL .*CUDA toolkit 13\.[0-9.]* (LibTorch.s runtime: 13\.' "$log" || { cat "$log"; fail "$site: no CUDA stack line in the configure"; }
  echo "ok: $site: cu130 configures in $((SECONDS - start)) s: $(grep -o 'NCCL [0-9.]* (.*' "$log" | head -n 1 | cut -c1-60)... toolkit 13"
done
# NCSA's pytorch-conda/2.12 loads its aws-ofi-nccl itself, at the configure too (the configure passed).
grep -q 'JOBMODULE=aws-ofi-nccl' "$tmp/delta.build.log" || fail "delta: pytorch-conda/2.12 did not bring its NCCL network plugin"

# Delta's build of step 2. Its compile and link commands are compared with those of this machine's
# own build folder (DDPW_BUILD_DIR, configured alike: CI builds and tests that one); where there is
# none to compare with, step 2 is built and run under Delta's modules.
main=${DDPW_BUILD_DIR:-}
same=no
if [ -n "$main" ] && [ -f "$main/build.ninja" ] && [ -f "$main/CMakeCache.txt" ]; then
  # The build folder's choices, compiler and flags included: what CI's environment chose for it
  # (CC, CXX, CXXFLAGS, scripts/test's compiler cache) is not the site's business.
  options=()
  for key in CMAKE_BUILD_TYPE DDPW_WERROR DDPW_PCH DDPW_UNITY CMAKE_C_COMPILER CMAKE_CXX_COMPILER CMAKE_CXX_FLAGS \
    CMAKE_EXE_LINKER_FLAGS CMAKE_CXX_COMPILER_LAUNCHER; do
    value=$(sed -n "s/^$key:[A-Z]*=//p" "$main/CMakeCache.txt")
    [ -z "$value" ] || options+=("-D$key=$value")
  done
  printf '%q ' "${options[@]}" >"$tmp/options"
  DDPW_TORCH_CUDA=cu130 in_site delta build "cmake -S . -B '$tmp/build-delta' $(cat "$tmp/options") >/dev/null &&
    ninja -C '$tmp/build-delta' -t commands solution_step2_env_launch > '$tmp/delta.commands'" ||
    { tail -40 "$tmp/delta.build.log"; fail "delta: the configure with the build folder's options failed"; }
  ninja -C "$main" -t commands solution_step2_env_launch | sed "s#$main#BUILD#g" >"$tmp/main.commands"
  sed -i "s#$tmp/build-delta#BUILD#g" "$tmp/delta.commands"
  # One folder, two spellings: a module's toolkit is /usr/local/cuda, a configure that found nvcc
  # elsewhere names the folder that link points at (/usr/local/cuda-13.0). The same files are the
  # same commands, so every path that exists is compared with its links resolved.
  for commands in "$tmp/main.commands" "$tmp/delta.commands"; do
    python3 -c '
import os, re, sys
real = lambda m: os.path.realpath(m[0]) if os.path.exists(m[0]) else m[0]
word = r"(?:^|(?<=[\s:,;=\"])|(?<=-I)|(?<=-L))/[^\s:,;=\"]+"  # a path that begins a word or a list item
sys.stdout.write(re.sub(word, real, sys.stdin.read(), flags=re.M))' <"$commands" >"$commands.resolved"
    mv "$commands.resolved" "$commands"
  done
  if diff -q "$tmp/main.commands" "$tmp/delta.commands" >/dev/null; then
    same=yes
    echo "ok: delta: its modules give step 2 the $(wc -l <"$tmp/delta.commands") compile and link commands of $main, built and tested there"
  else
    # Not the same commands: say which words differ, then prove it the long way (below).
    echo "note: delta: its modules give step 2 other commands than $main's; the words that differ:"
    diff <(tr ' ' '\n' <"$tmp/main.commands" | sort -u) <(tr ' ' '\n' <"$tmp/delta.commands" | sort -u) | head -20 || true
  fi
fi
if [ "$same" = no ]; then
  start=$SECONDS
  DDPW_TORCH_CUDA=cu130 in_site delta build "cmake --build '$tmp/build-delta' --target solution_step2_env_launch &&
    '$tmp/build-delta/bin/solutions/step2_env_launch' 1 1 --device cpu --snapshot '$tmp/delta-step2.pt'" ||
    { tail -40 "$tmp/delta.build.log"; fail "delta: step 2 did not build or run under its modules"; }
  grep -q 'final weights checksum' "$tmp/delta.build.log" || { tail -20 "$tmp/delta.build.log"; fail "delta: step 2 did not finish"; }
  echo "ok: delta: step 2 built and ran (1 rank, CPU) under Delta's modules in $((SECONDS - start)) s"
fi

# ---- 3. jobs: no toolkit of another CUDA major than the torch's; Delta's NCCL network plugin with
# pytorch-conda/2.12, and for a cu128 venv (module reset's CUDA 13.2 toolkit swapped for a CUDA 12
# one) in jobs only.
for site in "${sites[@]}"; do
  DDPW_TORCH_CUDA=cu130 in_site "$site" run "$report" || { cat "$tmp/$site.run.log"; fail "$site: env.sh failed in a job"; }
  line=$(grep '^BUILD=' "$tmp/$site.run.log")
  toolkit=$(sed -E 's/.* TOOLKIT=([^ ]*).*/\1/' <<<"$line")
  [ "$toolkit" = none ] || [ "$(major "$toolkit")" = 13 ] || fail "$site: a job has a CUDA $toolkit toolkit with a cu130 torch: $line"
  want=none; [ "$site" = delta ] && want=aws-ofi-nccl
  [[ $line == *"JOBMODULE=$want"* ]] || fail "$site: jobs load the NCCL network plugin: expected $want, got: $line"
done
for mode in build run; do
  DDPW_TORCH_CUDA=cu128 in_site delta "$mode" "$report" || { cat "$tmp/delta.$mode.log"; fail "delta: env.sh failed with cu128 ($mode)"; }
done
line=$(grep '^BUILD=' "$tmp/delta.run.log")
[[ $line == *"TOOLKIT=12.8 JOBMODULE=aws-ofi-nccl "* ]] || fail "delta: a cu128 job has not the CUDA 12.8 toolkit and its plugin: $line"
line=$(grep '^BUILD=' "$tmp/delta.build.log")
[[ $line == *"TOOLKIT=12.8 JOBMODULE=none "* ]] || fail "delta: a cu128 build has not the CUDA 12.8 toolkit, or the plugin: $line"
echo "ok: jobs have no toolkit of another CUDA major; Delta's NCCL network plugin comes with pytorch-conda/2.12, and with a cu128 venv in jobs only"
echo "PASS: every site's env.sh loads under Lmod with its own names; its default toolkit has its torch build's CUDA major; with this machine's cu130 every site configures (stack check included), and Delta's modules build step 2 as CI does"
