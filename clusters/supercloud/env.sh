# shellcheck shell=bash
# defines: MIT SuperCloud's modules, one line per role (clusters/modules.sh): "build" lines only when
#          you build (`source clusters/supercloud/env.sh`), "run" lines in every job too. Each role
#          lists its names in order of preference; the first one SuperCloud has is loaded.
# Every name and its source, or the command that confirms it: SOURCES.md. SuperCloud's DDP example
# (teaching-examples batch.sh) loads anaconda/2023a, cuda/11.6 and nccl/2.11.4-cuda11.6: a torch of
# 2023 with CUDA 11, below the library's 2.10 to 2.15, whose CUDA (12, 13) and own NCCL those modules would
# clash with (the configure stops on two CUDAs or two NCCLs). So: a torch 2.11 venv (cu126:
# SuperCloud's V100s), a CUDA 12 toolkit for the build, no NCCL module.
DDPW_SITE_NAME=SuperCloud DDPW_ENV_FILE=clusters/supercloud/env.sh
# shellcheck source=/dev/null
source /etc/profile                                # the seed does this first: it defines `module`
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build: cu126, the only one of torch 2.11 with kernels for the V100 (sm_70).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu126}
# mpirun: the example's OpenMPI first (is it still there? SOURCES.md), then the newer one users load.
ddpw_role run MPI mpi/openmpi-4.1.5 mpi/openmpi-5.0.5 || return 1
ddpw_role build Python unconfirmed anaconda/Python-ML-2025a || return 1  # a Python >= 3.10 under the venv
ddpw_venv || return 1                              # torch 2.11 cu126 (scripts/setup.sh): LibTorch
DDPW_TOOLKIT=$(ddpw_toolkit "cuda/12.2 cuda/12" "cuda/13") || return 1
ddpw_role build "CUDA toolkit" unconfirmed "$DDPW_TOOLKIT" || return 1  # nvcc of the torch build's CUDA major
ddpw_role build compiler unconfirmed gcc || return 1    # g++ >= 11
ddpw_role build CMake unconfirmed cmake || return 1     # CMake >= 3.21 (or pip install cmake in the venv)
