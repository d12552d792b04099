# shellcheck shell=bash
# defines: Princeton Della's modules, one line per role (clusters/modules.sh): "build" lines only when
#          you build (`source clusters/della/env.sh`), "run" lines in every job too (the programs
#          find LibTorch by their own RPATH; jobs need the venv for torchrun, step 2). Each role
#          lists its names in order of preference; the first one Della has is loaded.
# Every name and its source, or the command that confirms it: SOURCES.md. Princeton's DDP example
# loads anaconda3/2023.9 (multi_gpu_training); the newer versions come from Della users' 2025-26
# job scripts ("unconfirmed"): scripts/site-check della confirms them.
DDPW_SITE_NAME=Della DDPW_ENV_FILE=clusters/della/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build for Della's GPU nodes (della-gpu: A100, H100): cu128. cu130 only where nvidia-smi
# shows a driver of CUDA 13 (release 580 or newer). It picks the toolkit below.
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu128}
ddpw_purge
ddpw_role run Python anaconda3/2025.12 anaconda3/2023.9 || return 1  # a Python >= 3.10: the venv's interpreter
ddpw_venv || return 1                                               # torch 2.11 (scripts/setup.sh): LibTorch, torchrun
DDPW_TOOLKIT=$(ddpw_toolkit "cudatoolkit/12.9 cudatoolkit/12.8 cudatoolkit/12" "cudatoolkit/13") || return 1
ddpw_role build "CUDA toolkit" unconfirmed "$DDPW_TOOLKIT" || return 1  # nvcc of the torch build's CUDA major
ddpw_role build compiler unconfirmed gcc-toolset/12 || return 1     # g++ >= 11 (links its newer libstdc++ parts in)
ddpw_role build CMake unconfirmed cmake || return 1                 # CMake >= 3.21 (RHEL 9's own is 3.26)
