# shellcheck shell=bash
# defines: Princeton Della's modules, one line each (clusters/modules.sh): "build" lines only when
#          you build (`source clusters/della/env.sh`), "run" lines in every job too (the programs
#          find LibTorch by their own RPATH; jobs need the venv for torchrun, step 2).
# Last checked against Della's documentation on 2026-11-26 (clusters/della/README.md). Princeton's
# DDP example loads anaconda3/2023.9 (multi_gpu_training, 02_pytorch_ddp); the versions below are
# those of Della's 2025-26 job scripts by its users, so "unconfirmed": check them with `module avail`.
DDPW_SITE_NAME=Della DDPW_ENV_FILE=clusters/della/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build for Della's GPU nodes (della-gpu: A100, H100): cu128. cu130 only where nvidia-smi
# shows a driver of CUDA 13 (release 580 or newer). It picks the toolkit below.
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu128}
ddpw_purge
ddpw_load run anaconda3/2025.12 unconfirmed || return 1   # a Python >= 3.10: the venv's interpreter
ddpw_venv || return 1                                    # torch 2.11 (scripts/setup.sh): LibTorch, torchrun
DDPW_TOOLKIT=$(ddpw_toolkit cudatoolkit/12.8 cudatoolkit/13.0) || return 1
ddpw_load build "$DDPW_TOOLKIT" unconfirmed || return 1       # nvcc of the torch build's CUDA major
ddpw_load build gcc-toolset/12 unconfirmed || return 1   # g++ >= 11 (links its newer libstdc++ parts in)
ddpw_load build cmake unconfirmed || return 1            # CMake >= 3.21 (RHEL 9's own is 3.26)
