# shellcheck shell=bash
# defines: NCSA Delta's modules (the Red Hat 9 software stack), one line each (clusters/modules.sh):
#          "build" lines only when you build (`source clusters/delta/env.sh`), "run" lines in every
#          job too, "job" lines in jobs only.
# Last checked against Delta's documentation on 2026-11-26 (clusters/delta/README.md). The names are
# those of NCSA's 2026 workshop template and of Delta users' RH9 job scripts, not of Delta's docs:
# "unconfirmed", check them once with `module avail NAME` and fix this file.
DDPW_SITE_NAME=Delta DDPW_ENV_FILE=clusters/delta/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build: cu130 is NCSA's pytorch-conda/2.12 (its CUDA 13 needs a driver of release 580 or
# newer: nvidia-smi). cu128 (or cu126): a torch 2.11 venv of your own (scripts/setup.sh, README).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu130}
ddpw_reset                                        # Delta's default modules, as NCSA's job scripts start
if [ "$DDPW_TORCH_CUDA" = cu130 ]; then
  ddpw_load run pytorch-conda/2.12 unconfirmed || return 1   # torch 2.12 (CUDA 13.0): LibTorch, torchrun
else
  ddpw_venv || return 1                                      # your torch 2.11 venv of that build
fi
# The toolkit of the torch build's CUDA major (no NCCL module: LibTorch brings its own, and the
# configure checks it). A run line: `module reset` loads Delta's default toolkit (CUDA 12.8) in
# every job too, which this one replaces.
DDPW_TOOLKIT=$(ddpw_toolkit cudatoolkit/25.3_12.8 cudatoolkit/25.9_13.0) || return 1
ddpw_load run "$DDPW_TOOLKIT" unconfirmed || return 1
ddpw_load job aws-ofi-nccl/1.14.2 unconfirmed || return 1  # NCCL between nodes over Slingshot (libfabric)
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-hsn}       # Slingshot's interfaces, not the management NIC
