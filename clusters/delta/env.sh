# shellcheck shell=bash
# Delta (NCSA): the modules to build and run the course; sourced by every script in this folder.
# Lines marked "unconfirmed" are usual Delta names that the course's sources do not show:
# check them with `module avail` / `module spider NAME` and fix this file once.
module purge                  # unconfirmed: Delta may prefer `module reset` (its default set)
module load gcc               # unconfirmed: a C++20 compiler (g++ >= 11)
module load cmake             # unconfirmed: CMake >= 3.21
module load cuda              # unconfirmed: the CUDA toolkit LibTorch was built for (nvcc at configure)
module load nccl              # seen in a Delta job script
module load openmpi/4.1.5+cuda  # seen in a Delta job script (not needed by srun launches)
module load anaconda3_gpu     # unconfirmed: a Python with PyTorch; CMake takes LibTorch from it
