# shellcheck shell=bash
# HiPerGator (UF): the modules to build and run the course; sourced by every script here.
# Lines marked "unconfirmed" are not in the course's sources: check with `module spider NAME`.
module purge
module load pytorch            # the workshop used pytorch/1.10; this course needs torch >= 1.13
module load gcc                # unconfirmed: a C++20 compiler (g++ >= 11)
module load cuda               # unconfirmed: the CUDA toolkit matching the pytorch module (nvcc)
module load cmake              # unconfirmed: CMake >= 3.21
