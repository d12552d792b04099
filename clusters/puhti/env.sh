# shellcheck shell=bash
# defines: CSC Puhti's modules, one line each (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/puhti/env.sh`), "run" lines in every job too. CSC's pytorch
#          module is a container: it gives the jobs torchrun, but CMake outside the container cannot
#          see its LibTorch; the build uses a LibTorch archive instead (README.md). Names marked
#          "unconfirmed" are not in CSC's documentation: check them with `module avail NAME`.
# Puhti ran its last jobs on 31 July 2026 (README.md); these are the names it had then.
DDPW_SITE_NAME=Puhti DDPW_ENV_FILE=clusters/puhti/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
# The torch build of the LibTorch archive: cu126, the only one with kernels for Puhti's V100 (sm_70).
export DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-cu126}
ddpw_purge
ddpw_load run pytorch || return 1                   # CSC's examples: torchrun for the step 2 scripts
ddpw_load run gcc/11.3.0 unconfirmed || return 1    # g++ >= 11; its libstdc++ is needed at run time too
DDPW_TOOLKIT=$(ddpw_toolkit cuda/12.6.0 cuda/13.0) || return 1
ddpw_load build "$DDPW_TOOLKIT" unconfirmed || return 1  # nvcc of the archive's CUDA major (not the default cuda: 11)
ddpw_load build cmake unconfirmed || return 1       # CMake >= 3.21
