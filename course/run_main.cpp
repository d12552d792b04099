#include "course/run_main.h"

#include <cstdio>
#include <exception>

#include "course/options.h"         // defines: name_library_settings
#include "ddp/detail/cuda_check.h"  // defines: UnsupportedCudaError
#include "ddp/process.h"            // defines: configure_process

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

// LibTorch's c10::Error appends a C++ backtrace to its message: a person needs the first lines.
std::string without_backtrace(std::string what) {
  for (const char* marker : {"\nException raised from", "\nFrame ", "\nframe #"}) {
    auto pos = what.find(marker);
    if (pos != std::string::npos) what.resize(pos);
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return what;
}

std::string& error_prefix() {
  static std::string prefix;
  return prefix;
}

}  // namespace

void set_error_prefix(const std::string& prefix) { error_prefix() = prefix; }

int run_main(const std::function<int()>& body, const std::string& prefix) {
  configure_process(ProcessSettings{});  // every setting: before the first tensor and thread
  name_library_settings();               // the library's hints name this command line's flags
  // Read when the error is printed: check_launch may have named the process by then.
  auto who = [&] {
    const std::string& name = error_prefix().empty() ? prefix : error_prefix();
    return name.empty() ? name : name + " ";
  };
  try {
    return body();
  } catch (const UnsupportedCudaError& e) {
    // The library names the torch build; the course says how its set-up installs it.
    const std::string here = e.build().empty() ? std::string()
                                               : "; here: DDPW_TORCH=" + std::string(kAdvisedTorchRelease) +
                                                     " DDPW_TORCH_CUDA=" + e.build() +
                                                     " scripts/setup.sh (or the site's recipe in "
                                                     "clusters/<site>/README.md), then a fresh build folder";
    std::fprintf(stderr, "%serror: %s (fix: %s%s)\n", who().c_str(), e.message().c_str(), e.hint().c_str(),
                 here.c_str());
  } catch (const Error& e) {
    if (e.hint().empty())
      std::fprintf(stderr, "%serror: %s\n", who().c_str(), e.message().c_str());
    else
      std::fprintf(stderr, "%serror: %s (fix: %s)\n", who().c_str(), e.message().c_str(), e.hint().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%serror: %s\n", who().c_str(), without_backtrace(e.what()).c_str());
  }
  std::fflush(stderr);
  return kExitError;
}

}  // namespace ddpw
