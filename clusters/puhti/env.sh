# shellcheck shell=bash
# defines: CSC Puhti's modules, one line each (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/puhti/env.sh`), "run" lines in every job too. CSC's pytorch
#          module is a container: it gives the jobs torchrun, but CMake outside the container cannot
#          see its LibTorch; the build uses a LibTorch archive instead (README.md). Names marked
#          "unconfirmed" are not in the course's sources: check them with `module spider NAME`.
DDPW_SITE_NAME=Puhti DDPW_ENV_FILE=clusters/puhti/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
ddpw_purge
ddpw_load run pytorch || return 1                  # CSC's examples: torchrun for the step 2 scripts
ddpw_load run gcc unconfirmed || return 1          # g++ >= 11; its libstdc++ is needed at run time too
ddpw_load build cuda unconfirmed || return 1       # nvcc of the CUDA the LibTorch archive was built for
ddpw_load build cmake unconfirmed || return 1      # CMake >= 3.21
