# shellcheck shell=bash
# defines: NCSA Delta's modules, one line each (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/delta/env.sh`), "run" lines in every job too. Names marked
#          "unconfirmed" are usual Delta names that the course's sources do not show: check them
#          once with `module spider NAME` and fix this file.
DDPW_SITE_NAME=Delta DDPW_ENV_FILE=clusters/delta/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
ddpw_purge                                         # unconfirmed: Delta may prefer `module reset`
ddpw_load run anaconda3_gpu unconfirmed || return 1  # a Python with PyTorch: CMake takes LibTorch from it
ddpw_load run gcc unconfirmed || return 1          # g++ >= 11; its libstdc++ is needed at run time too
ddpw_load build cmake unconfirmed || return 1      # CMake >= 3.21
ddpw_load build cuda unconfirmed || return 1       # nvcc of the CUDA that LibTorch was built for
ddpw_load build nccl || return 1                   # seen in a Delta job script; nccl.h for the build
