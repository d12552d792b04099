# shellcheck shell=bash
# Della (Princeton): the modules to build and run the course; sourced by every script here.
# anaconda3/2023.9 is what Princeton's current DDP example loads (multi_gpu_training, 02_pytorch_ddp);
# the course's seed README (2022) loads anaconda3/2021.5 instead. Unconfirmed: that either is still
# installed (`module avail anaconda3`). Lines marked "unconfirmed" are in neither example.
module purge
module load anaconda3/2023.9   # seed: anaconda3/2021.5; its torch provides LibTorch to CMake
conda activate torch-env       # your environment with pytorch (conda create -n torch-env pytorch ...)
module load cudatoolkit        # unconfirmed: Princeton's name for the CUDA toolkit (nvcc)
module load gcc-toolset/12     # unconfirmed: a C++20 compiler (g++ >= 11)
module load cmake              # unconfirmed: CMake >= 3.21 (maybe pip install cmake in torch-env)
