# shellcheck shell=bash
# defines: UF HiPerGator's modules, one line each (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/hipergator/env.sh`), "run" lines in every job too (torchrun comes
#          from the pytorch module). Names marked "unconfirmed" are not in the course's sources:
#          check them once with `module spider NAME` and fix this file.
DDPW_SITE_NAME=HiPerGator DDPW_ENV_FILE=clusters/hipergator/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
ddpw_purge
ddpw_load run pytorch || return 1                  # the workshop loaded pytorch/1.10; the course needs >= 1.13
ddpw_load run gcc unconfirmed || return 1          # g++ >= 11; its libstdc++ is needed at run time too
ddpw_load build cuda unconfirmed || return 1       # nvcc matching the pytorch module's CUDA
ddpw_load build cmake unconfirmed || return 1      # CMake >= 3.21
