# shellcheck shell=bash
# defines: CSC Roihu's modules (its GPU side, Roihu-GPU), one line per role (clusters/modules.sh):
#          "build" lines only when you build (`source clusters/roihu/env.sh` on roihu-gpu.csc.fi),
#          "run" lines in every job too. Each role lists the names SOURCES.md gives a source for, in
#          order of preference; the first one Roihu has is loaded. The GPU nodes are GH200 (aarch64):
#          the build uses torch 2.11's aarch64 wheel as its LibTorch (README.md); CSC's
#          python-pytorch module (torch 2.10, in the library's window, but an Apptainer container
#          whose torch CMake files are not on the host: README.md) gives the jobs torchrun.
# Every name and its source (page, date read), or the command that confirms it: SOURCES.md.
DDPW_SITE_NAME=Roihu DDPW_ENV_FILE=clusters/roihu/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build of the LibTorch (GH200: sm_90, in every aarch64 build of torch 2.11): cu128 with
# Roihu-GPU's default toolkit (CUDA 12.9); cu130 with its CUDA 13.1 (the driver CSC shows is CUDA 13).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu128}
# module reset: Roihu-GPU's defaults (GNU compilers, CUDA-aware OpenMPI, the default CUDA), whatever
# the shell that submitted the job had loaded (CSC documents the defaults, not the command: SOURCES.md).
ddpw_reset
ddpw_role run PyTorch python-pytorch/2.10 python-pytorch || return 1  # CSC's, renamed from pytorch/2.10: torchrun
# The compiler: the default GNU suite (module reset) goes with the default CUDA 12.9; CSC pairs
# CUDA 13.1 with gcc/15.2.0 (nvcc refuses a host compiler newer than its release knows).
DDPW_COMPILER=$(ddpw_toolkit "" "gcc/15.2.0") || return 1
[ -z "$DDPW_COMPILER" ] || ddpw_role build compiler "$DDPW_COMPILER" || return 1
DDPW_TOOLKIT=$(ddpw_toolkit "cuda/12.9.1 cuda/12" "cuda/13.1.1 cuda/13") || return 1
ddpw_role build "CUDA toolkit" "$DDPW_TOOLKIT" || return 1  # nvcc of the torch build's CUDA major
ddpw_role build CMake unconfirmed cmake || return 1          # CMake >= 3.21
