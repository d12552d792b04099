# shellcheck shell=bash
# defines: MIT SuperCloud's modules, one line each (clusters/modules.sh): "build" lines only when you
#          build (`source clusters/supercloud/env.sh`), "run" lines in every job too: the four of
#          SuperCloud's DDP example (teaching-examples batch.sh, 2023; its README still says
#          openmpi-4.1.3). The course's seed README (2022) loads older ones: anaconda/2021a,
#          mpi/openmpi-4.0, cuda/10.1, nccl/2.5.6-cuda10.1. Names marked "unconfirmed" are in neither.
DDPW_SITE_NAME=SuperCloud DDPW_ENV_FILE=clusters/supercloud/env.sh
# shellcheck source=/dev/null
source /etc/profile                                # the seed does this first: it defines `module`
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
ddpw_load run anaconda/2023a || return 1           # its torch gives CMake LibTorch (seed: anaconda/2021a)
ddpw_load run mpi/openmpi-4.1.5 || return 1        # mpirun (seed: mpi/openmpi-4.0)
ddpw_load run cuda/11.6 || return 1                # seed: cuda/10.1; the example's torch uses it at run time
ddpw_load run nccl/2.11.4-cuda11.6 || return 1     # seed: nccl/2.5.6-cuda10.1
ddpw_load build gcc unconfirmed || return 1        # g++ >= 11
ddpw_load build cmake unconfirmed || return 1      # CMake >= 3.21 (or pip install --user cmake)
