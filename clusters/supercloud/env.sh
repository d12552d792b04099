# shellcheck shell=bash
# MIT SuperCloud: the modules to build and run the course; sourced by every script here.
# The four versioned modules are those of SuperCloud's DDP example as it is now (teaching-examples
# batch.sh, 2023; its README still says openmpi-4.1.3). The course's seed README (2022) loads older
# ones: anaconda/2021a, mpi/openmpi-4.0, cuda/10.1, nccl/2.5.6-cuda10.1. Unconfirmed: which of the
# two sets SuperCloud still offers (`module avail anaconda cuda nccl`), and whether 2021a's torch is
# new enough (>= 1.13) for CMake; lines marked "unconfirmed" are in neither example.
source /etc/profile
module load anaconda/2023a          # its torch provides LibTorch to CMake (seed: anaconda/2021a)
module load mpi/openmpi-4.1.5       # seed: mpi/openmpi-4.0
module load cuda/11.6               # seed: cuda/10.1
module load nccl/2.11.4-cuda11.6    # seed: nccl/2.5.6-cuda10.1
module load gcc                     # unconfirmed: a C++20 compiler (g++ >= 11)
module load cmake                   # unconfirmed: CMake >= 3.21 (or pip install --user cmake)
