// make_gloo_backend of a build configured without Gloo's headers (cmake/LibTorch.cmake: DDPW_GLOO).
#include "ddp/detail/gloo_backend.h"
#include "ddp/error.h"
#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace ddp {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>&, int rank, int, bool,
                                                    std::chrono::milliseconds, std::chrono::milliseconds) {
  throw Error("rank " + std::to_string(rank) +
                  " needs the Gloo backend (ranks on the CPU), but this build has none: Gloo's headers were "
                  "not found when it was configured (NCCL only)",
              "train on GPUs (" + setting_value(Setting::kDevice, "cuda") +
                  ", NCCL), or rebuild with Gloo in a fresh build folder: "
                  "apt-get install libgloo-dev, or without root cmake -DDDPW_GLOO_INCLUDE_DIR=<a folder with "
                  "gloo/algorithm.h and gloo/config.h>");
}

}  // namespace ddp
