// The precompiled header every target shares (CMake: REUSE_FROM ddp). Parsing <torch/torch.h>
// costs ~20 s per translation unit; compiled once, each file that includes it builds in half that.
#pragma once

#include <torch/torch.h>
