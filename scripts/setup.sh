#!/usr/bin/env bash
# Installs what the course needs, and only what is missing. Safe to run again (it is, by both
# README commands). As root on Debian it installs packages; elsewhere (a cluster login node with
# modules loaded) it installs nothing and reports what it found.
#
#   scripts/setup.sh            everything (scripts/test)
#   scripts/setup.sh --first    what the build and step 0 need: toolchain, CLI11, nlohmann-json,
#                               Gloo's headers, torch (scripts/course, before step 0)
#   scripts/setup.sh --rest     the rest: GoogleTest, Fashion-MNIST, Slurm, munge, OpenMPI, the
#                               linters (scripts/course, once step 0 has printed its first lines)
#
#   DDPW_HOME      where the torch wheel is cached (default ~/.cache/ddp-workshop), outside the
#                  clone, so a fresh clone (CI) does not download gigabytes again
#   DDPW_TORCH     the torch version to install (default 2.11.0: CUDA 13.0, like nvcc here)
set -euo pipefail

DDPW_HOME=${DDPW_HOME:-$HOME/.cache/ddp-workshop}
DDPW_TORCH=${DDPW_TORCH:-2.11.0}
VENV=$DDPW_HOME/venv

say() { printf 'setup: %s\n' "$*"; }

phase=all
case ${1:-} in
  "") ;;
  --first) phase=first ;;
  --rest) phase=rest ;;
  *) say "unknown argument '$1' (use --first, --rest, or nothing for everything)"; exit 2 ;;
esac

# Debian packages, first what the build and step 0 need: the toolchain, the CLI/JSON libraries and
# Gloo's headers (c10d's Gloo header includes them and no LibTorch ships them); then the test
# library, the dataset, the launchers of the course, and the guard rails' linters (the tests
# lint.format and lint.shellcheck).
FIRST_PACKAGES=(build-essential cmake ninja-build git python3 python3-venv zlib1g-dev
                libcli11-dev nlohmann-json3-dev libgloo-dev)
REST_PACKAGES=(libgtest-dev dataset-fashion-mnist
               slurm-wlm munge openmpi-bin libopenmpi-dev libpmix-dev iproute2 util-linux procps
               clang-format shellcheck)
case $phase in
  first) PACKAGES=("${FIRST_PACKAGES[@]}") ;;
  rest) PACKAGES=("${REST_PACKAGES[@]}") ;;
  *) PACKAGES=("${FIRST_PACKAGES[@]}" "${REST_PACKAGES[@]}") ;;
esac

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  mapfile -t missing < <(missing_packages)
  if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The package lists once per set-up: --rest skips the update --first made an hour ago or less.
    if [ "$phase" != rest ] || [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -60 2>/dev/null)" ]; then
      apt-get -o DPkg::Lock::Timeout=900 update -qq
    fi
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "Debian packages: all present"
  fi
else
  say "not root or not Debian: installing nothing (on a cluster, load the modules of clusters/<site>/env.sh)"
  for tool in cmake g++ ninja nvcc mpirun srun; do
    printf 'setup:   %-7s %s\n' "$tool" "$(command -v "$tool" || echo 'not found')"
  done
  say "CLI11 and Gloo's headers need no root: the configure fetches CLI11 if it is missing, and"
  say "without Gloo's headers builds for GPUs only (NCCL), as its summary says (README: Building by hand)"
fi

[ "$phase" != rest ] || exit 0   # torch came with --first

# LibTorch. An explicit one (a libtorch archive or a module via CMAKE_PREFIX_PATH/Torch_DIR) or a
# python3 with torch on PATH wins; otherwise the torch wheel, cached in $VENV.
torch_of() { "$1" -c 'import torch, sys; sys.stdout.write(torch.__version__)' 2>/dev/null; }
if [ -n "${Torch_DIR:-}${CMAKE_PREFIX_PATH:-}" ]; then
  say "LibTorch: using Torch_DIR/CMAKE_PREFIX_PATH from the environment"
elif [ -n "$(torch_of python3)" ] && [ ! -x "$VENV/bin/python3" ]; then
  say "LibTorch: the torch $(torch_of python3) of $(command -v python3)"
elif [ "$(torch_of "$VENV/bin/python3")" = "$DDPW_TORCH" ] || [[ "$(torch_of "$VENV/bin/python3")" == "$DDPW_TORCH+"* ]]; then
  say "LibTorch: torch $(torch_of "$VENV/bin/python3") cached in $VENV"
elif [ "$(id -u)" -ne 0 ] && [ -n "${SLURM_CLUSTER_NAME:-}${MODULEPATH:-}" ]; then
  say "LibTorch: none found; load the site's pytorch module (clusters/<site>/env.sh) and run again"
  exit 1
else
  if ! command -v nvcc >/dev/null; then
    say "note: no nvcc on PATH. The torch wheel is CUDA-enabled and its CMake config needs nvcc:"
    say "      install the CUDA toolkit of the wheel's CUDA major version (13), or load its module"
  fi
  say "installing torch==$DDPW_TORCH into $VENV (once; later runs reuse it)"
  mkdir -p "$DDPW_HOME"
  [ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV"
  "$VENV/bin/python3" -m pip install -q --upgrade pip
  "$VENV/bin/python3" -m pip install -q "torch==$DDPW_TORCH" numpy matplotlib
  say "LibTorch: torch $(torch_of "$VENV/bin/python3") in $VENV"
fi
# The venv also brings torchrun (step 2) and matplotlib (plots): put it on PATH for the scripts.
if [ -x "$VENV/bin/torchrun" ]; then say "torchrun: $VENV/bin/torchrun"; fi
