// defines: load_idx_dataset — the four MNIST-format IDX files (gzipped or not), as used by MNIST
//          and Fashion-MNIST. Errors name the file, what was expected and where to get it.
#pragma once

#include <string>

#include "ddp/data.h"

namespace ddpw {

enum class Split { kTrain, kTest };

// Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. Images stay uint8 [N,1,28,28]
// (normalised when a batch is cut, with `mean`/`std`), labels int64 [N].
ddp::Dataset load_idx_dataset(const std::string& dir, Split split, double mean, double std);

}  // namespace ddpw
