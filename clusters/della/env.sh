# shellcheck shell=bash
# Della (Princeton): the modules to build and run the course; sourced by every script here.
# Lines marked "unconfirmed" are not in the course's sources: check with `module avail`.
module purge
module load anaconda3/2023.9   # Princeton's DDP example; its torch provides LibTorch to CMake
conda activate torch-env       # your environment with pytorch (conda create -n torch-env pytorch ...)
module load cudatoolkit        # unconfirmed: Princeton's name for the CUDA toolkit (nvcc)
module load gcc-toolset/12     # unconfirmed: a C++20 compiler (g++ >= 11)
module load cmake              # unconfirmed: CMake >= 3.21 (maybe pip install cmake in torch-env)
