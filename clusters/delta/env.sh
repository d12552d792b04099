# shellcheck shell=bash
# defines: NCSA Delta's modules (the Red Hat 9 software stack), one line per role (clusters/modules.sh):
#          "build" lines only when you build (`source clusters/delta/env.sh`), "run" lines in every
#          job too, "job" lines in jobs only. Each role lists its names in order of preference; the
#          first one Delta has is loaded.
# Every name and its source, or the command that confirms it: SOURCES.md. Delta's pages show none of
# these RH9 module names: they come from NCSA's 2026 workshop template and Delta users' job scripts
# ("unconfirmed"): the instructor's scripts/site-check delta confirms them before the day.
DDPW_SITE_NAME=Delta DDPW_ENV_FILE=clusters/delta/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build: cu130 is NCSA's pytorch-conda/2.12 (its CUDA 13 needs a driver of release 580 or
# newer: nvidia-smi). cu128 (or cu126): a torch 2.11 venv of your own (scripts/setup.sh, README) with
# the CUDA 12.8 toolkit that `module reset` loads: the alternative where no CUDA 13 toolkit exists.
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu130}
ddpw_reset                                        # Delta's default modules, as NCSA's job scripts start
if [ "$DDPW_TORCH_CUDA" = cu130 ]; then
  ddpw_role run PyTorch unconfirmed pytorch-conda/2.12 || return 1  # torch 2.12 (CUDA 13.0): LibTorch, torchrun
else
  ddpw_venv || return 1                                             # your torch 2.11 venv of that build
fi
# The toolkit of the torch build's CUDA major (no NCCL module: LibTorch brings its own, and the
# configure checks it). A run line: `module reset` loads Delta's default toolkit (CUDA 12.8) in
# every job too, which a CUDA 13 one replaces. cudatoolkit/25.9_13.0 is unverified (SOURCES.md): where
# Delta has no CUDA 13 toolkit, env.sh stops naming what it has; then use DDPW_TORCH_CUDA=cu128.
DDPW_TOOLKIT=$(ddpw_toolkit "cudatoolkit/25.3_12.8" "cudatoolkit/25.9_13.0") || return 1
ddpw_role run "CUDA toolkit" unconfirmed "$DDPW_TOOLKIT" || return 1
ddpw_role job "NCCL network plugin" unconfirmed aws-ofi-nccl/1.14.2 || return 1  # NCCL over Slingshot (libfabric)
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-hsn}       # Slingshot's interfaces, not the management NIC
