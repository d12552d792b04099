# shellcheck shell=bash
# Puhti (CSC): the modules to build and run the course; sourced by every script here.
# Lines marked "unconfirmed" are not in the course's sources: check with `module spider NAME`.
module purge
module load pytorch            # CSC's examples; its torch provides LibTorch (and torchrun)
module load gcc                # unconfirmed: a C++20 compiler (g++ >= 11)
module load cuda               # unconfirmed: the CUDA toolkit matching the pytorch module (nvcc)
module load cmake              # unconfirmed: CMake >= 3.21
