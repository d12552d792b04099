# shellcheck shell=bash
# defines: CSC Roihu's modules, one line each (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/roihu/env.sh`), "run" lines in every job too. Roihu's GPU nodes
#          are GH200 (aarch64): the build uses torch 2.11's aarch64 wheel unpacked in the project's
#          disk area as its LibTorch (README.md); CSC's pytorch module gives the jobs torchrun.
# Last checked against CSC's documentation on 2026-11-26. The module names come from Roihu users'
# 2026 job scripts, not CSC's pages ("unconfirmed"): check them with `module avail NAME`.
DDPW_SITE_NAME=Roihu DDPW_ENV_FILE=clusters/roihu/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build of the LibTorch (GH200: sm_90, in every aarch64 build of torch 2.11): cu128, or
# cu130 where nvidia-smi shows a driver of CUDA 13 (release 580 or newer).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu128}
ddpw_purge
ddpw_load run pytorch/2.10 unconfirmed || return 1  # CSC's: torchrun for the step 2 scripts
DDPW_TOOLKIT=$(ddpw_toolkit cuda/12.8 cuda/13.0) || return 1
ddpw_load build "$DDPW_TOOLKIT" unconfirmed || return 1  # nvcc of the torch build's CUDA major
ddpw_load build cmake unconfirmed || return 1       # CMake >= 3.21
