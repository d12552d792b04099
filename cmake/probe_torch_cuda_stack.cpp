// A configure-time probe (cmake/CudaStack.cmake runs it; no GPU needed): loads LibTorch's CUDA
// library as a program would and prints the versions it was built with and loads, one per line:
//   torch_nccl 2.28.9      NCCL whose nccl.h LibTorch was compiled with (torch::cuda::nccl::version())
//   loaded_nccl 2.28.9     the libnccl it loads here (absent when NCCL is linked in statically)
//   cudart 13.0            the CUDA runtime it loads (its soname pins the major version)
// Through dlopen/dlsym, so the probe needs neither LibTorch's headers nor its link line.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* torch_cuda = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (torch_cuda == nullptr) {
    std::printf("error %s\n", dlerror());
    return 1;
  }
  // std::uint64_t torch::cuda::nccl::version(): major << 32 | minor << 16 | patch, a constant.
  if (auto version = reinterpret_cast<std::uint64_t (*)()>(dlsym(torch_cuda, "_ZN5torch4cuda4nccl7versionEv"))) {
    const std::uint64_t v = version();
    std::printf("torch_nccl %u.%u.%u\n", unsigned(v >> 32), unsigned((v >> 16) & 0xffff), unsigned(v & 0xffff));
  }
  // dlsym on the handle searches the library's dependencies too: the libnccl and libcudart it loaded.
  if (auto nccl = reinterpret_cast<int (*)(int*)>(dlsym(torch_cuda, "ncclGetVersion"))) {
    int v = 0;  // NCCL >= 2.9: major * 10000 + minor * 100 + patch
    if (nccl(&v) == 0) std::printf("loaded_nccl %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
  }
  if (auto cudart = reinterpret_cast<int (*)(int*)>(dlsym(torch_cuda, "cudaRuntimeGetVersion"))) {
    int v = 0;  // major * 1000 + minor * 10
    if (cudart(&v) == 0) std::printf("cudart %d.%d\n", v / 1000, v % 1000 / 10);
  }
  return 0;
}
