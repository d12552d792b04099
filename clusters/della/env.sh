# shellcheck shell=bash
# defines: Princeton Della's modules, one line each (clusters/modules.sh): "build" lines only when
#          you build (`source clusters/della/env.sh`), "run" lines in every job too (none: Della's
#          scripts launch with srun, and the programs find LibTorch by their own RPATH).
# anaconda3/2023.9 is what Princeton's current DDP example loads (multi_gpu_training, 02_pytorch_ddp);
# the course's seed README (2022) loads anaconda3/2021.5. Names marked "unconfirmed" are in neither.
DDPW_SITE_NAME=Della DDPW_ENV_FILE=clusters/della/env.sh
# shellcheck source=clusters/modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../modules.sh" || return 1
ddpw_purge
ddpw_load build anaconda3/2023.9 || return 1       # seed: anaconda3/2021.5; its torch gives CMake LibTorch
if [ "${DDPW_MODULES:-all}" != run ]; then         # your environment with pytorch, for the build
  conda activate torch-env || {
    echo "ddpw: error: conda activate torch-env failed (fix: create it once: conda create -n torch-env pytorch, or put your environment's name in clusters/della/env.sh)" >&2
    return 1; }
fi
ddpw_load build cudatoolkit unconfirmed || return 1  # Princeton's name for the CUDA toolkit (nvcc)
ddpw_load build gcc-toolset/12 unconfirmed || return 1  # g++ >= 11 (links its newer libstdc++ parts in)
ddpw_load build cmake unconfirmed || return 1      # CMake >= 3.21 (or pip install cmake in torch-env)
