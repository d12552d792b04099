# shellcheck shell=bash
# defines: UF HiPerGator's modules, one line each (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/hipergator/env.sh`), "run" lines in every job too (torchrun
#          comes from the venv). Last checked against HiPerGator's documentation on 2026-11-26
#          (clusters/hipergator/README.md). The versions are those of HiPerGator users' 2025-26
#          job scripts ("unconfirmed"): check them once with `module avail NAME` and fix this file.
DDPW_SITE_NAME=HiPerGator DDPW_ENV_FILE=clusters/hipergator/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build: cu128 has kernels for every GPU of HiPerGator's (2080 Ti, L4, A100, B200: sm_75
# to sm_100). cu130 only where nvidia-smi shows a driver of CUDA 13 (release 580 or newer).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu128}
ddpw_purge
ddpw_load run python/3.12 unconfirmed || return 1   # a Python >= 3.10: the venv's interpreter
ddpw_venv || return 1                               # torch 2.11 (scripts/setup.sh): LibTorch, torchrun
ddpw_load run gcc/14.2.0 unconfirmed || return 1    # g++ >= 11; its libstdc++ is needed at run time too
DDPW_TOOLKIT=$(ddpw_toolkit cuda/12.8.1 cuda/13.0) || return 1
ddpw_load build "$DDPW_TOOLKIT" unconfirmed || return 1  # nvcc of the torch build's CUDA major
ddpw_load build cmake unconfirmed || return 1       # CMake >= 3.21
