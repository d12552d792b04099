# shellcheck shell=bash
# defines: NCSA Delta's modules (the Red Hat 9 software stack), one line per role (clusters/modules.sh):
#          "build" lines only when you build (`source clusters/delta/env.sh`), "run" lines in every
#          job too, "job" lines in jobs only. Each role lists its names in order of preference; the
#          first one Delta has is loaded.
# Every name and its source, or the command that confirms it: SOURCES.md. Delta's user guide shows
# none of these RH9 module names: pytorch-conda/2.12, its aws-ofi-nccl and cudatoolkit/26.5_13.2 are
# in NCSA's kit of its October 2026 Delta workshop; the cu128 names only in Delta users' RH9.4 job
# scripts ("unconfirmed"): the instructor's scripts/site-check delta confirms them before the day.
DDPW_SITE_NAME=Delta DDPW_ENV_FILE=clusters/delta/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The LibTorch: cu130 is NCSA's pytorch-conda/2.12 (torch 2.12.1, CUDA 13.0, in the library's 2.10 to
# 2.15; a conda env on the host, whose torch's CMake files CMake finds through its python3: the
# learner installs nothing). Its CUDA 13 needs a driver of release 580 or newer (nvidia-smi). It
# loads NCCL's network plugin for Slingshot (aws-ofi-nccl/1.19.2) itself, and refuses to load on
# RH9.4 nodes, where NCSA's torch is pytorch-conda/2.8: below 2.10, so there (or where nvidia-smi
# shows CUDA 12) the fallback, a torch 2.11 cu128 venv of your own (scripts/setup.sh, README), and a
# CUDA 12 toolkit.
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu130}
ddpw_reset                                        # Delta's default modules, as NCSA's job scripts start
if [ "$DDPW_TORCH_CUDA" = cu130 ]; then
  ddpw_role run PyTorch pytorch-conda/2.12 || {   # torch 2.12 (CUDA 13.0): LibTorch, torchrun, aws-ofi-nccl
    DDPW_OS=$(. /etc/os-release 2>/dev/null && echo "${NAME:-} ${VERSION_ID:-}")
    echo "ddpw: error: pytorch-conda/2.12 did not load on $(hostname -s) (${DDPW_OS:-its OS unknown}); NCSA: it refuses to load on RH9.4 nodes, \"use pytorch-conda/2.8 there\": torch 2.8, below the 2.10 to 2.15 the library builds with (fix: the fallback, a torch 2.11 cu128 venv, made with pytorch-conda/2.8's Python on an RH9.4 node: export DDPW_TORCH_CUDA=cu128 and clusters/delta/README.md, step 0; or use RH9.6 nodes)" >&2
    return 1
  }
else
  ddpw_venv || return 1                                             # the fallback: your torch 2.11 venv of that build
fi
# The toolkit of the torch build's CUDA major (no NCCL module: LibTorch brings its own, and the
# configure checks it). A run line: `module reset` loads Delta's default toolkit in every job too
# (cudatoolkit/26.5_13.2, CUDA 13.2, on RH9.6 nodes), which a CUDA 12 one replaces for cu126/cu128.
DDPW_TOOLKIT=$(ddpw_toolkit "cudatoolkit/25.3_12.8" "cudatoolkit/26.5_13.2") || return 1
if [ "$DDPW_TORCH_CUDA" = cu130 ]; then
  ddpw_role run "CUDA toolkit" "$DDPW_TOOLKIT" || return 1
else
  ddpw_role run "CUDA toolkit" unconfirmed "$DDPW_TOOLKIT" || return 1
  # NCCL over Slingshot (libfabric) for your own torch: pytorch-conda/2.12 loads its own plugin.
  ddpw_role job "NCCL network plugin" unconfirmed aws-ofi-nccl/1.14.2 || return 1
fi
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-hsn}       # Slingshot's interfaces, not the management NIC
