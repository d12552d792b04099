# shellcheck shell=bash
# MIT SuperCloud: the modules to build and run the course; sourced by every script here.
# The first five lines are SuperCloud's own DDP example; "unconfirmed" ones are not.
source /etc/profile
module load anaconda/2023a          # its torch provides LibTorch to CMake
module load mpi/openmpi-4.1.5
module load cuda/11.6
module load nccl/2.11.4-cuda11.6
module load gcc                     # unconfirmed: a C++20 compiler (g++ >= 11)
module load cmake                   # unconfirmed: CMake >= 3.21 (or pip install --user cmake)
