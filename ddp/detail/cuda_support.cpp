#include "ddp/detail/cuda_support.h"

#include <algorithm>
#include <cctype>

#include "ddp/setting_names.h"  // defines: setting_name, setting_value

namespace ddp {
namespace {

// One entry of an arch list: "sm_86" (a binary kernel image) or "compute_120" (PTX).
struct Arch {
  std::string name;  // as listed
  bool ptx = false;
  int number = 0;         // 10 * major + minor
  bool specific = false;  // sm_90a, sm_100a: runs on exactly that GPU, nothing newer
};

bool parse_arch(const std::string& name, Arch& arch) {
  std::string digits;
  if (name.rfind("sm_", 0) == 0) {
    digits = name.substr(3);
  } else if (name.rfind("compute_", 0) == 0) {
    digits = name.substr(8);
    arch.ptx = true;
  } else {
    return false;
  }
  size_t n = 0;
  while (n < digits.size() && std::isdigit(static_cast<unsigned char>(digits[n]))) ++n;
  if (n == 0 || n > 4) return false;
  arch.number = std::stoi(digits.substr(0, n));
  arch.specific = digits.substr(n) == "a";  // "f" (family) runs on the family: treated as plain
  return true;
}

// A binary kernel image runs on GPUs of its major version and a minor at least its own (sm_80 on
// an A10's 8.6, never sm_90 on a 10.0); PTX is compiled by the driver for any newer GPU.
bool cubin_runs_on(const Arch& arch, int capability) {
  if (arch.ptx) return false;
  if (arch.specific) return arch.number == capability;
  return arch.number / 10 == capability / 10 && arch.number % 10 <= capability % 10;
}

bool ptx_runs_on(const Arch& arch, int capability) { return arch.ptx && !arch.specific && arch.number <= capability; }

std::vector<Arch> parse_all(const std::vector<std::string>& names) {
  std::vector<Arch> archs;
  for (const auto& name : names) {
    Arch arch;
    arch.name = name;
    if (parse_arch(name, arch)) archs.push_back(arch);
  }
  return archs;
}

// torch 2.11's Linux builds and the GPU architectures they carry kernels for (PyTorch's CUDA
// support matrix for release 2.11, RELEASE.md; pytorch#172352 dropped Volta from cu128).
struct TorchBuild {
  const char* name;
  int cuda;
  std::vector<int> archs;
};

const std::vector<TorchBuild>& torch_builds(const std::string& machine) {
  static const std::vector<TorchBuild> x86_64 = {
      {"cu130", 13000, {75, 80, 86, 90, 100, 120}},
      {"cu128", 12080, {75, 80, 86, 90, 100, 120}},
      {"cu126", 12060, {50, 60, 70, 75, 80, 86, 90}},
  };
  static const std::vector<TorchBuild> aarch64 = {
      {"cu130", 13000, {80, 90, 100, 110, 120}},
      {"cu128", 12080, {80, 90, 100, 120}},
      {"cu126", 12060, {80, 90}},
  };
  return machine == "aarch64" || machine == "arm64" ? aarch64 : x86_64;
}

int major_of(int cuda_version) { return cuda_version / 1000; }

// The oldest driver release that supports a CUDA major version (NVIDIA's compatibility table;
// within one major, minor version compatibility lets an older driver of that major run it).
std::string driver_release_for(int cuda_version) {
  switch (major_of(cuda_version)) {
    case 13: return "580";
    case 12: return "525";
    case 11: return "450";
    default: return "";
  }
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : " ") + name;
  return out;
}

std::string gpu_text(const CudaSupportInput& in) {
  const std::string arch = sm_name(in.capability);
  return in.gpu_name.empty() ? "this GPU (" + arch + ")" : in.gpu_name + " (" + arch + ")";
}

std::string torch_text(const CudaSupportInput& in) {
  return "this LibTorch" + (in.torch_version.empty() ? std::string() : " (" + in.torch_version + ")");
}

// "install the cu126 build of torch 2.11.0, which <reason>, and build against its LibTorch ..."
std::string install_hint(const std::string& build, const std::string& reason) {
  return "install the " + build + " build of torch " + std::string(kAdvisedTorchRelease) + ", which " + reason +
         ", and build against its LibTorch in a fresh build folder";
}

}  // namespace

std::vector<std::string> parse_arch_flags(const std::string& text) {
  // Every token that starts with sm_ or compute_ after '=' ',' ';' or a blank: in gencode flags,
  // code= is what the library carries (arch= is only the PTX it was compiled from).
  std::vector<std::string> out;
  std::string token;
  bool in_code = true;  // a plain list has no arch=/code= keys
  auto flush = [&] {
    Arch arch;
    if (in_code && parse_arch(token, arch) && std::find(out.begin(), out.end(), token) == out.end())
      out.push_back(token);
    token.clear();
  };
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ' ';
    if (c == ' ' || c == '\t' || c == '\n' || c == ';' || c == ',' || c == '[' || c == ']' || c == '\'' || c == '"') {
      flush();
      continue;
    }
    if (c == '=') {
      // "arch=" starts the virtual arch (not a kernel image), "code=" the images themselves.
      in_code = token != "arch";
      token.clear();
      continue;
    }
    token += c;
    if (token == "-gencode") token.clear();
  }
  return out;
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string sm_name(int capability) { return "sm_" + std::to_string(capability); }

std::string suggest_torch_build(int capability, int driver_cuda, const std::string& machine) {
  for (const auto& build : torch_builds(machine)) {
    if (driver_cuda > 0 && major_of(driver_cuda) < major_of(build.cuda)) continue;
    for (int number : build.archs)
      if (cubin_runs_on(Arch{"", false, number, false}, capability)) return build.name;
  }
  return "";
}

CudaSupportVerdict judge_cuda_support(const CudaSupportInput& in) {
  CudaSupportVerdict v;
  const bool driver_known = in.driver_cuda > 0 && in.torch_cuda > 0;
  const std::string driver_line =
      in.driver_cuda > 0 ? "driver CUDA " + cuda_version_text(in.driver_cuda) : std::string("driver CUDA unknown");
  const std::string torch_line = in.torch_cuda > 0 ? "LibTorch CUDA " + cuda_version_text(in.torch_cuda) : "";

  // The driver first: too old for LibTorch's CUDA major, the runtime sees no GPU at all.
  if (driver_known && major_of(in.driver_cuda) < major_of(in.torch_cuda)) {
    v.verdict = CudaSupport::kDriverTooOld;
    const std::string release = driver_release_for(in.torch_cuda);
    v.what = "the NVIDIA driver supports CUDA up to " + cuda_version_text(in.driver_cuda) + ", but " + torch_text(in) +
             " is built for CUDA " + cuda_version_text(in.torch_cuda) +
             (release.empty() ? "" : ", which needs driver release " + release + " or newer") +
             " (nvidia-smi shows the driver's CUDA version)";
    const std::string build = in.capability > 0 ? suggest_torch_build(in.capability, in.driver_cuda, in.machine)
                                                : suggest_torch_build(80, in.driver_cuda, in.machine);
    v.build = build;
    v.hint = build.empty() ? "ask the site for a newer NVIDIA driver, or use a LibTorch built for CUDA " +
                                 std::to_string(major_of(in.driver_cuda)) + ".x"
                           : install_hint(build, "this driver runs") + "; or ask the site for a newer driver";
    v.summary = "FAILED: " + v.what;
    return v;
  }
  if (in.capability <= 0) {
    v.summary = "no GPU seen; " + driver_line + (torch_line.empty() ? "" : ", " + torch_line);
    return v;
  }
  const std::string gpu = gpu_text(in);
  if (in.arch_list.empty()) {
    v.summary = gpu + ": LibTorch's arch list unknown, not checked; " + driver_line +
                (torch_line.empty() ? "" : ", " + torch_line);
    return v;
  }

  const std::vector<Arch> archs = parse_all(in.arch_list);
  // The runtime takes the newest image that runs on the GPU (sm_86 over sm_80 for an 8.9).
  std::string cubin, ptx;
  int cubin_number = -1, ptx_number = -1;
  for (const Arch& arch : archs) {
    if (cubin_runs_on(arch, in.capability) && arch.number > cubin_number) {
      cubin = arch.name;
      cubin_number = arch.number;
    }
    if (ptx_runs_on(arch, in.capability) && arch.number > ptx_number) {
      ptx = arch.name;
      ptx_number = arch.number;
    }
  }
  const std::string built_for =
      "LibTorch" + (in.torch_version.empty() ? "" : " " + in.torch_version) + " (" + join(in.arch_list) + ")";
  const std::string tail = "; " + driver_line + (torch_line.empty() ? "" : ", " + torch_line);
  if (!cubin.empty()) {
    v.verdict = CudaSupport::kOk;
    v.summary = gpu + ": kernels " + cubin + " of " + built_for + tail;
    return v;
  }
  if (!ptx.empty()) {
    // PTX is compiled by the driver at start-up, and only a driver at least as new as the CUDA
    // that wrote it can read it (minor version compatibility does not cover PTX).
    if (in.driver_cuda > 0 && in.torch_cuda > 0 && in.driver_cuda < in.torch_cuda) {
      v.verdict = CudaSupport::kDriverTooOld;
      v.what = gpu + " has no kernel image in " + torch_text(in) + ", only PTX (" + ptx +
               ") that the driver must compile, and the driver supports CUDA " + cuda_version_text(in.driver_cuda) +
               ", older than the CUDA " + cuda_version_text(in.torch_cuda) + " that wrote it";
      const std::string build = suggest_torch_build(in.capability, in.driver_cuda, in.machine);
      v.build = build;
      v.hint = build.empty() ? "ask the site for a driver that supports CUDA " + cuda_version_text(in.torch_cuda)
                             : install_hint(build, "has kernels for " + sm_name(in.capability)) +
                                   "; or ask the site for a newer driver";
      v.summary = "FAILED: " + v.what;
      return v;
    }
    v.verdict = CudaSupport::kOk;
    v.summary = gpu + ": PTX " + ptx + " of " + built_for + ", compiled by the driver at start-up" + tail;
    return v;
  }
  v.verdict = CudaSupport::kNoKernels;
  v.what = gpu + " has no kernels in " + torch_text(in) + ", built for " + join(in.arch_list) +
           ": every CUDA operation would fail with \"no kernel image is available for execution on the device\"";
  const std::string build = suggest_torch_build(in.capability, in.driver_cuda, in.machine);
  if (!build.empty()) {
    v.build = build;
    v.hint = install_hint(build, "has kernels for " + sm_name(in.capability));
  } else if (!suggest_torch_build(in.capability, 0, in.machine).empty()) {
    const std::string any = suggest_torch_build(in.capability, 0, in.machine);
    v.build = any;
    v.hint = "the " + any + " build of torch " + std::string(kAdvisedTorchRelease) + " has kernels for " +
             sm_name(in.capability) + " but this driver (CUDA " + cuda_version_text(in.driver_cuda) +
             ") cannot run it: ask the site for a newer driver, then " + install_hint(any, "fits both");
  } else {
    v.hint = "no build of torch " + std::string(kAdvisedTorchRelease) + " for Linux " + in.machine +
             " has kernels for " + sm_name(in.capability) + ": run on GPUs of another kind, or on the CPU (" +
             setting_value(Setting::kDevice, "cpu") + ")";
  }
  v.summary = "FAILED: " + v.what;
  return v;
}

}  // namespace ddp
