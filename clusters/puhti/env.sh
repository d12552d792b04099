# shellcheck shell=bash
# defines: CSC Puhti's modules, one line per role (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/puhti/env.sh`), "run" lines in every job too. CSC's pytorch
#          module is a container: it gives the jobs torchrun, but CMake outside the container cannot
#          see its LibTorch; the build uses a LibTorch archive instead (README.md).
# Puhti ran its last jobs on 31 July 2026 (README.md); these are the names it had then, with their
# sources in SOURCES.md.
DDPW_SITE_NAME=Puhti DDPW_ENV_FILE=clusters/puhti/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build of the LibTorch archive: cu126, the only one with kernels for Puhti's V100 (sm_70).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu126}
ddpw_purge
ddpw_role run PyTorch pytorch/2.5 pytorch || return 1        # CSC's examples: torchrun for the step 2 scripts
ddpw_role run compiler gcc/11.3.0 || return 1                 # g++ >= 11; its libstdc++ at run time too
DDPW_TOOLKIT=$(ddpw_toolkit "cuda/12.6.0 cuda/12" "cuda/13") || return 1
ddpw_role build "CUDA toolkit" unconfirmed "$DDPW_TOOLKIT" || return 1  # of the archive's CUDA major (CSC's example: 11.7)
ddpw_role build CMake unconfirmed cmake || return 1          # CMake >= 3.21
