# shellcheck shell=bash
# defines: UF HiPerGator's modules, one line per role (clusters/modules.sh): "build" lines only when
#          you build (`source clusters/hipergator/env.sh`), "run" lines in every job too (torchrun
#          comes from the venv). Each role lists its names in order of preference; the first one
#          HiPerGator has is loaded.
# Every name and its source, or the command that confirms it: SOURCES.md. UFRC's pages name none of
# these versions: they come from HiPerGator users' 2025-26 job scripts ("unconfirmed"), then the
# newest of the same major (Lmod's extended default): scripts/site-check hipergator confirms them.
DDPW_SITE_NAME=HiPerGator DDPW_ENV_FILE=clusters/hipergator/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build: cu128 has kernels for every GPU of HiPerGator's (2080 Ti, L4, A100, B200: sm_75
# to sm_100). cu130 only where nvidia-smi shows a driver of CUDA 13 (release 580 or newer).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu128}
ddpw_purge
ddpw_role run Python unconfirmed python/3.12 python/3 || return 1   # a Python >= 3.10: the venv's interpreter
ddpw_venv || return 1                                              # torch 2.11 (scripts/setup.sh): LibTorch, torchrun
ddpw_role run compiler unconfirmed gcc/14.2.0 gcc/14 || return 1   # g++ >= 11; its libstdc++ at run time too
DDPW_TOOLKIT=$(ddpw_toolkit "cuda/12.8.1 cuda/12" "cuda/13") || return 1
ddpw_role build "CUDA toolkit" unconfirmed "$DDPW_TOOLKIT" || return 1  # nvcc of the torch build's CUDA major
ddpw_role build CMake unconfirmed cmake || return 1                # CMake >= 3.21
