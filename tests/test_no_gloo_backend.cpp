// A build configured without Gloo's headers (NCCL only: a login node without libgloo-dev) has
// ddp/detail/no_gloo_backend.cpp in place of the Gloo backend: a rank on the CPU stops there, saying
// why and naming both fixes. Compiled here beside the main build's real backend (this program links
// only the stand-in); build.login_node_build checks that such a build compiles it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "ddp/detail/gloo_backend.h"
#include "ddp/error.h"

TEST(NoGlooBackend, ACpuRankStopsNamingTheFix) {
  try {
    ddp::make_gloo_backend({}, 1, 2, false, std::chrono::milliseconds(1000), std::chrono::milliseconds(1000));
    FAIL() << "make_gloo_backend of an NCCL-only build returned a backend";
  } catch (const ddp::Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("rank 1 needs the Gloo backend"), std::string::npos) << text;
    EXPECT_NE(text.find("apt-get install libgloo-dev"), std::string::npos) << text;
    EXPECT_NE(text.find("DDPW_GLOO_INCLUDE_DIR"), std::string::npos) << text;
    EXPECT_NE(text.find("train on GPUs (device \"cuda\", NCCL)"), std::string::npos)
        << text;  // the library's name of the setting
  }
}
