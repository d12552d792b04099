#!/usr/bin/env bash
# Installs what the course needs, and only what is missing. Safe to run again (it is, by both
# README commands). As root on Debian it installs packages; elsewhere (a cluster login node with
# modules loaded) it installs nothing and reports what it found.
#
#   scripts/setup.sh            everything (scripts/test)
#   scripts/setup.sh --first    what the build and step 0 need: toolchain, CLI11, nlohmann-json,
#                               Gloo's headers, torch (scripts/course, before step 0)
#   scripts/setup.sh --rest     the rest: GoogleTest, Fashion-MNIST, the fortunes text (--model gpt),
#                               Slurm, munge, OpenMPI, the linters (scripts/course, once step 0 has printed its first lines)
#   scripts/setup.sh --shared DIR   the instructor's: everything, with torch installed once in DIR
#                               for a room of learners on one machine, from the system's python3
#                               (DDPW_SHARED_PYTHON, default /usr/bin/python3: never one in a home,
#                               such as a pyenv shim first on root's PATH), readable by all, checked
#                               as another user; prints the learners' `export DDPW_HOME=DIR` line.
#                               A learner's set-up with that DDPW_HOME installs nothing.
#
#   DDPW_HOME      where the torch wheel is cached (default ~/.cache/ddp-workshop), outside the
#                  clone, so a fresh clone (CI) does not download gigabytes again
#   DDPW_TORCH     the torch version to install (default 2.15.0, the newest the tests passed with:
#                  its wheel is CUDA 13.2; a CUDA 13 toolkit builds with it, see docs/building.md)
#                  (2.10.0 to 2.15.0 build: cmake/LibTorch.cmake; scripts/test --torch VERSION tests one)
#   DDPW_TORCH_CUDA       the CUDA build of torch: cu126 (V100 and older need it), cu128, cu130, cu132
#                         (default: the default index's wheel: cu128 for 2.10, cu130 for 2.11 to 2.14,
#                         cu132 for 2.15; its CUDA major is the toolkit's the configure wants). The GPUs and the
#                         driver decide: clusters/<site>/README.md says which, and why
#   DDPW_TORCH_INDEX_URL  the wheel index of that build (cu126, cu128): the --index-url that
#                         PyTorch's Get Started page gives for Linux / Pip / that CUDA version
#   DDPW_NO_UV=1          install the wheels with pip even where uv could (see install_wheels)
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }

phase=all shared=""
case ${1:-} in
  "") ;;
  --first) phase=first ;;
  --rest) phase=rest ;;
  --shared)
    [ -n "${2:-}" ] || { say "--shared needs a folder: scripts/setup.sh --shared DIR (e.g. /opt/ddpw)"; exit 2; }
    shared=$(realpath -m -- "$2"); DDPW_HOME=$shared ;;
  *) say "unknown argument '$1' (use --first, --rest, --shared DIR, or nothing for everything)"; exit 2 ;;
esac
DDPW_HOME=${DDPW_HOME:-$HOME/.cache/ddp-workshop}
DDPW_TORCH=${DDPW_TORCH:-2.15.0}
VENV=$DDPW_HOME/venv
SHARED_MARK=ddpw-shared-install.txt  # in DIR: made by --shared; learners' set-ups install nothing there
SHARED_PYTHON=${DDPW_SHARED_PYTHON:-/usr/bin/python3}

# closed_to_others PATH: the first folder on the way to PATH (as given, and with its links followed)
# that other users cannot enter (no x for others), or nothing. PATH itself need not exist yet.
closed_to_others() {
  local path dir mode
  for path in "$1" "$(readlink -m -- "$1")"; do
    dir=$(dirname -- "$path")
    while :; do
      if [ -e "$dir" ]; then
        mode=$(stat -Lc %a -- "$dir")
        (( ${mode: -1} & 1 )) || { echo "$dir (owner $(stat -Lc %U -- "$dir"), mode $mode)"; return; }
      fi
      [ "$dir" != / ] || break
      dir=$(dirname -- "$dir")
    done
  done
}
# A learner's set-up in the instructor's shared install (its mark, or a DDPW_HOME this user cannot
# write): it uses what is there and installs nothing.
in_shared=""
if [ -z "$shared" ] && { [ -f "$DDPW_HOME/$SHARED_MARK" ] || { [ -d "$DDPW_HOME" ] && [ ! -w "$DDPW_HOME" ]; }; }; then
  in_shared=1
fi
if [ -n "$shared" ]; then
  say "a shared install in $shared: torch once, for every learner on this machine (python: $SHARED_PYTHON)"
  "$SHARED_PYTHON" -c 'import venv, ensurepip' 2>/dev/null || {
    say "error: $SHARED_PYTHON cannot make a venv (missing, or no venv module). Fix: apt-get install python3 python3-venv,"
    say "       or DDPW_SHARED_PYTHON=<a python3 every learner can run> scripts/setup.sh --shared $shared"; exit 1; }
  closed=$(closed_to_others "$SHARED_PYTHON")
  [ -z "$closed" ] || {
    say "error: $SHARED_PYTHON lies behind $closed, a folder other users cannot enter:"
    say "       the learners could not run the venv. Fix: DDPW_SHARED_PYTHON=<a python3 outside any home, e.g. /usr/bin/python3>"; exit 1; }
  closed=$(closed_to_others "$shared/venv")
  [ -z "$closed" ] || {
    say "error: the learners cannot reach $shared: $closed is closed to other users."
    say "       Fix: a folder outside any home (e.g. /opt/ddpw, or the project disk), or chmod o+x that folder"; exit 1; }
  # A venv made earlier from a python the learners cannot run (e.g. root's pyenv): made again.
  if [ -L "$VENV/bin/python3" ] || [ -e "$VENV/bin/python3" ]; then
    closed=$(closed_to_others "$VENV/bin/python3")
    if [ -n "$closed" ]; then
      say "the venv in $shared runs $(readlink -f -- "$VENV/bin/python3"), behind $closed: making it again from $SHARED_PYTHON"
      rm -rf "$VENV"
    fi
  fi
  umask 022   # everything made from here on: readable by all
fi

# Debian packages, first what the build and step 0 need: the toolchain, the CLI/JSON libraries and
# Gloo's headers (c10d's Gloo header includes them and no LibTorch ships them); then the test
# library, the dataset, the launchers of the course, and the guard rails' linters (the tests
# lint.format and lint.shellcheck), Lmod and Tcl (the sites' env.sh under both module systems:
# tests; Environment Modules itself is unpacked below, its Debian package conflicts with lmod), and ccache
# (scripts/test: the build tests' fresh trees reuse the main build's objects).
FIRST_PACKAGES=(build-essential cmake ninja-build git python3 python3-venv zlib1g-dev
                libcli11-dev nlohmann-json3-dev libgloo-dev)
REST_PACKAGES=(libgtest-dev dataset-fashion-mnist fortunes
               slurm-wlm munge openmpi-bin libopenmpi-dev libpmix-dev iproute2 util-linux procps
               clang-format shellcheck lmod tcl8.6 ccache)
# Only for the tests (scripts/test, which runs this without a phase; not scripts/course's two
# phases): Clang compiles each installed header alone (build.installed_headers_alone) in a third
# of GCC's time; without it, that test uses GCC.
TEST_PACKAGES=(clang)
case $phase in
  first) PACKAGES=("${FIRST_PACKAGES[@]}") ;;
  rest) PACKAGES=("${REST_PACKAGES[@]}") ;;
  *) PACKAGES=("${FIRST_PACKAGES[@]}" "${REST_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
esac

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# LibTorch. An explicit one (a libtorch archive or a module via CMAKE_PREFIX_PATH/Torch_DIR) or a
# python3 with torch on PATH wins; otherwise the torch wheel, cached in $VENV. DDPW_TORCH_CUDA asks
# for one CUDA build of it: the GPU decides (torch 2.11's cu128 and cu130 have no kernels for a
# V100, only cu126 does) and so does the driver (cu130 needs release 580 or newer).
# install_wheels SPEC...: SPEC, numpy and matplotlib into the venv. With no wheel index of the
# user's (DDPW_TORCH_INDEX_URL, or an index-url in pip's configuration), uv installs them: it fetches and
# unpacks torch's ~4 GB (the CUDA libraries are wheels too) in parallel, ~40 s where pip takes
# ~100-140 s on 2 cores, which is most of the time before step 0's first line. Its cache lives
# in DDPW_HOME, beside the venv (same filesystem: files are hard-linked, not stored twice). Where
# the user has an index or uv cannot be had, pip installs them as it always did (DDPW_NO_UV=1 too).
own_index() {
  [ -z "$torch_index" ] || return 0
  "$VENV/bin/python3" -m pip config list 2>/dev/null | grep -qE '(^|\.)(extra-)?index-url='
}
install_wheels() {
  local uv=$VENV/bin/uv
  [ -x "$uv" ] || uv=$(command -v uv || echo "$uv")   # the venv's, else one on PATH, else pip installs it
  if [ -z "${DDPW_NO_UV:-}" ] && ! own_index &&
     { [ -x "$uv" ] || "$VENV/bin/python3" -m pip install -q uv; }; then
    # Behind a TLS-inspecting proxy the system trusts the proxy's certificate, uv's own roots do
    # not ("invalid peer certificate: UnknownIssuer"): where the system has a CA store, uv uses it
    # (UV_SYSTEM_CERTS; uv before 0.11 reads UV_NATIVE_TLS). Its error, if any, goes to a log.
    local certs=() log=$DDPW_HOME/uv-error.log reason
    if [ -r /etc/ssl/certs/ca-certificates.crt ] || [ -r /etc/pki/tls/certs/ca-bundle.crt ]; then
      certs=(UV_SYSTEM_CERTS="${UV_SYSTEM_CERTS:-true}" UV_NATIVE_TLS="${UV_NATIVE_TLS:-true}")
    fi
    mkdir -p "$DDPW_HOME"
    if env ${certs[@]+"${certs[@]}"} UV_CACHE_DIR="${UV_CACHE_DIR:-$DDPW_HOME/uv-cache}" \
         "$uv" pip install -q --python "$VENV/bin/python3" "$@" numpy matplotlib 2>"$log"; then
      rm -f "$log"
      return
    fi
    reason=$(grep -E '^ *(error|Caused by|cause):' "$log" | tail -n 1 | sed -E 's/^ *(error|Caused by|cause): *//' | cut -c1-120)
    say "uv could not install them${reason:+ ($reason)}: pip instead; uv's whole message: $log"
  fi
  "$VENV/bin/python3" -m pip install -q --upgrade pip
  local index=()
  [ -z "$torch_index" ] || index=(--index-url "$torch_index")
  "$VENV/bin/python3" -m pip install -q "${index[@]}" "$@"
  "$VENV/bin/python3" -m pip install -q numpy matplotlib
}

# shared_torch VERSION: a learner's set-up in the instructor's shared install: its torch, or why it
# cannot be used (never an install into it).
shared_torch() {
  local closed
  if wants "$1"; then
    say "LibTorch: torch $1 in the shared install $VENV (installing nothing)"
    return
  fi
  say "error: the shared install in $DDPW_HOME (DDPW_HOME) cannot be used:"
  if [ ! -L "$VENV/bin/python3" ] && [ ! -e "$VENV/bin/python3" ]; then
    say "       it has no venv. Fix: your instructor runs scripts/setup.sh --shared $DDPW_HOME"
  elif closed=$(closed_to_others "$VENV/bin/python3") && [ -n "$closed" ]; then
    say "       its python3 is $(readlink -m -- "$VENV/bin/python3"), behind $closed, a folder you ($(id -un)) cannot enter."
    say "       Fix: your instructor makes it again with scripts/setup.sh --shared $DDPW_HOME (it uses the system's python3)"
  elif [ -n "$1" ]; then
    say "       it holds torch $1, not $DDPW_TORCH${DDPW_TORCH_CUDA:+ ($DDPW_TORCH_CUDA)}. Fix: leave DDPW_TORCH/DDPW_TORCH_CUDA unset, or ask your instructor"
  else
    say "       its python3 runs no torch: $("$VENV/bin/python3" -c 'import torch' 2>&1 | tail -n 1)"
    say "       Fix: your instructor runs scripts/setup.sh --shared $DDPW_HOME again"
  fi
  say "       (or your own install, about 4.7 GB: DDPW_HOME=~/.cache/ddp-workshop scripts/setup.sh)"
  exit 1
}

# finish_shared: the shared install readable by all, checked as another user, and the learners' line.
finish_shared() {
  local version check=""
  chmod -R a+rX "$shared"
  version=$(torch_of "$VENV/bin/python3")
  printf '%s\n' "A shared install of torch $version for the course, made by $(id -un) on $(date -u +%Y-%m-%dT%H:%MZ)" \
    "with scripts/setup.sh --shared $shared (python: $SHARED_PYTHON). Learners: export DDPW_HOME=$shared" \
    > "$shared/$SHARED_MARK"
  chmod 644 "$shared/$SHARED_MARK"
  if [ "$(id -u)" -eq 0 ] && PATH=$PATH:/usr/sbin:/sbin command -v runuser >/dev/null && id nobody >/dev/null 2>&1; then
    check=$(cd / && PATH=$PATH:/usr/sbin:/sbin runuser -u nobody -- "$VENV/bin/python3" -c 'import torch; print(torch.__version__)' 2>&1) || {
      say "error: the user nobody cannot run the shared install's python: ${check##*$'\n'}"; exit 1; }
    check="; checked: the user nobody imports torch $check from it"
  else
    local closed
    closed=$(find "$shared" ! -perm -o+r -print -quit)
    [ -z "$closed" ] || { say "error: $closed is not readable by other users (fix: chmod -R a+rX $shared)"; exit 1; }
  fi
  say "shared install ready: torch $version in $VENV, readable by all$check"
  say "each learner, once per shell (or in ~/.bashrc), before scripts/setup.sh and scripts/build.sh:"
  printf '\n    export DDPW_HOME=%s\n\n' "$shared"
}

setup_torch() {
  torch_of() { "$1" -c 'import torch, sys; sys.stdout.write(torch.__version__)' 2>/dev/null; }
  DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-}
  torch_index=${DDPW_TORCH_INDEX_URL:-}
  case $DDPW_TORCH_CUDA in
    "") ;;
    cu126|cu128|cu130|cu132) ;;
    *) say "DDPW_TORCH_CUDA=$DDPW_TORCH_CUDA is not a build of torch $DDPW_TORCH: use cu126 (V100 and older), cu128, cu130 or cu132 (clusters/<site>/README.md says which)"
       exit 1 ;;
  esac
  # wants VERSION: the cached torch is the one asked for (with DDPW_TORCH_CUDA, that build of it).
  wants() {
    [ -n "$1" ] || return 1
    if [ -n "$DDPW_TORCH_CUDA" ]; then [ "$1" = "$DDPW_TORCH+$DDPW_TORCH_CUDA" ]; return; fi
    [ "$1" = "$DDPW_TORCH" ] || [[ "$1" == "$DDPW_TORCH+"* ]]
  }
  cached=$(torch_of "$VENV/bin/python3" || true)
  if [ -z "$shared" ] && [ -n "${Torch_DIR:-}${CMAKE_PREFIX_PATH:-}" ]; then
    say "LibTorch: using Torch_DIR/CMAKE_PREFIX_PATH from the environment"
  elif [ -n "$in_shared" ]; then
    shared_torch "$cached"
  elif [ -z "$shared" ] && [ -z "$DDPW_TORCH_CUDA" ] && [ -n "$(torch_of python3)" ] && [ ! -x "$VENV/bin/python3" ]; then
    say "LibTorch: the torch $(torch_of python3) of $(command -v python3)"
  elif wants "$cached"; then
    say "LibTorch: torch $cached cached in $VENV"
  elif [ -z "$shared" ] && [ -z "$DDPW_TORCH_CUDA" ] && [ "$(id -u)" -ne 0 ] && [ -n "${SLURM_CLUSTER_NAME:-}${MODULEPATH:-}" ]; then
    say "LibTorch: none found; load the site's pytorch module (clusters/<site>/env.sh) and run again, or"
    say "          install a torch build for the site's GPUs: DDPW_TORCH_CUDA=cu126|cu128|cu130|cu132 scripts/setup.sh"
    say "          (clusters/<site>/README.md says which build, and where the venv goes: DDPW_HOME)"
    exit 1
  else
    # The default index holds one CUDA build of each release; the others live on PyTorch's own index.
    case $DDPW_TORCH in
      2.10.*) default_build=cu128 ;;
      2.1[1-4].*) default_build=cu130 ;;
      *) default_build=cu132 ;;  # 2.15
    esac
    if [ -z "$torch_index" ] && [ -n "$DDPW_TORCH_CUDA" ] && [ "$DDPW_TORCH_CUDA" != "$default_build" ] &&
       [ -z "${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}" ]; then
      say "DDPW_TORCH_CUDA=$DDPW_TORCH_CUDA needs PyTorch's $DDPW_TORCH_CUDA wheel index, and none is set."
      say "Fix: export DDPW_TORCH_INDEX_URL=<the --index-url that PyTorch's Get Started page gives for"
      say "     Linux / Pip / CUDA ${DDPW_TORCH_CUDA:2:2}.${DDPW_TORCH_CUDA:4}> (or your site's mirror of it), then run this again"
      exit 1
    fi
    toolkit=13; case ${DDPW_TORCH_CUDA:-$default_build} in cu12*) toolkit=12 ;; esac
    if ! command -v nvcc >/dev/null; then
      say "note: no nvcc on PATH. The torch wheel is CUDA-enabled and its CMake config needs nvcc:"
      say "      install the CUDA toolkit of the wheel's CUDA major version ($toolkit), or load its module"
    elif nvcc_major=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p') &&
         [ -n "$nvcc_major" ] && [ "$nvcc_major" != "$toolkit" ]; then
      # e.g. torch 2.10's default wheel (CUDA 12.8) beside a CUDA 13 nvcc: cmake/CudaStack.cmake refuses it.
      say "note: nvcc on PATH is CUDA $nvcc_major, the wheel's CUDA is $toolkit: the configure will stop (two CUDAs)."
      say "      Fix: a CUDA $toolkit toolkit first on PATH (or its module), or torch $DDPW_TORCH's build for CUDA $nvcc_major"
      say "      (DDPW_TORCH_CUDA with DDPW_TORCH_INDEX_URL); without a GPU, a CPU-only build: export DDPW_OTHER_CUDA_TOOLKIT=ON"
    fi
    if [ -n "$cached" ] && [ -n "$DDPW_TORCH_CUDA" ] && [[ $cached != *"+$DDPW_TORCH_CUDA" ]]; then
      # Another CUDA build in the venv: a fresh venv, not a second set of CUDA libraries beside the first.
      say "the venv holds torch $cached, not the $DDPW_TORCH_CUDA build: making a new venv in $VENV"
      say "(configure a fresh build folder afterwards: the old one links the old build)"
      rm -rf "$VENV"
    fi
    what="torch==$DDPW_TORCH${DDPW_TORCH_CUDA:+ ($DDPW_TORCH_CUDA)}"
    mkdir -p "$DDPW_HOME"
    say "installing $what into $VENV (once; later runs reuse it): about 4.7 GB with its CUDA libraries,"
    say "  $(df -Pk "$DDPW_HOME" | awk 'NR == 2 { printf "%.1f GB", $4 / 1048576 }') free there"
    if [ -z "$shared" ]; then
      say "  (a room of learners on one machine needs it once, not in each home: scripts/setup.sh --shared DIR, INSTRUCTOR.md)"
    fi
    venv_python=python3
    [ -z "$shared" ] || venv_python=$SHARED_PYTHON
    [ -x "$VENV/bin/python3" ] || "$venv_python" -m venv "$VENV"
    install_wheels "torch==$DDPW_TORCH"
    installed=$(torch_of "$VENV/bin/python3" || true)
    if ! wants "$installed"; then
      say "the index gave torch ${installed:-(none)}, not the $DDPW_TORCH_CUDA build of $DDPW_TORCH."
      say "Fix: set DDPW_TORCH_INDEX_URL to PyTorch's $DDPW_TORCH_CUDA wheel index (its Get Started page gives it)"
      exit 1
    fi
    say "LibTorch: torch $installed in $VENV"
  fi
}

torch_pid=""
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  mapfile -t missing < <(missing_packages)
  if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The package lists once per set-up: --rest skips the update --first made an hour ago or less.
    if [ "$phase" != rest ] || [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -60 2>/dev/null)" ]; then
      apt-get -o DPkg::Lock::Timeout=900 update -qq
    fi
    # On a bare machine the torch wheel installs while apt installs the toolchain: it needs only
    # python3 and its venv module, which come first.
    if [ "$phase" != rest ]; then
      early=()
      for p in "${missing[@]}"; do case $p in python3|python3-venv) early+=("$p") ;; esac; done
      [ "${#early[@]}" -eq 0 ] ||
        apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${early[@]}" >/dev/null
      set -m  # its own process group: if apt fails, the EXIT trap stops the whole install
      setup_torch &
      torch_pid=$!
      set +m
      trap 'kill -- -"$torch_pid" 2>/dev/null || true' EXIT
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
  say "without Gloo's headers builds for GPUs only (NCCL), as its summary says (docs/building.md)"
fi

# Environment Modules (Tcl), the module tool of Princeton's clusters, beside Lmod for the tests
# (tests/build/env_modules_tcl.sh): Debian's package conflicts with lmod (installing it removes
# lmod), so its files are unpacked into a folder of their own; its modulecmd.tcl runs with tcl8.6.
ENV_MODULES_DIR=${DDPW_ENV_MODULES_DIR:-/opt/ddp-workshop/environment-modules}
if [ "$phase" != first ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null &&
   [ -z "$(find "$ENV_MODULES_DIR" -name modulecmd.tcl -print -quit 2>/dev/null)" ]; then
  deb_dir=$(mktemp -d)
  chmod 755 "$deb_dir"   # apt's download user writes there
  if (cd "$deb_dir" && apt-get download -qq environment-modules >/dev/null 2>&1) &&
     mkdir -p "$ENV_MODULES_DIR" && dpkg-deb -x "$deb_dir"/environment-modules_*.deb "$ENV_MODULES_DIR"; then
    say "Environment Modules (Tcl): unpacked into $ENV_MODULES_DIR (for the tests)"
  else
    say "Environment Modules (Tcl): not unpacked (apt-get download environment-modules failed); its test will say so"
  fi
  rm -rf "$deb_dir"
fi

[ "$phase" != rest ] || exit 0   # torch came with --first
if [ -n "$torch_pid" ]; then
  wait "$torch_pid"  # its failure (with its fix, printed) is this script's: set -e
  trap - EXIT
else
  setup_torch
fi

# The venv also brings torchrun (step 2) and matplotlib (plots): put it on PATH for the scripts.
if [ -x "$VENV/bin/torchrun" ]; then say "torchrun: $VENV/bin/torchrun"; fi
[ -z "$shared" ] || finish_shared
