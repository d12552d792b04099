# defines: what find_package(Torch) needs first when LibTorch has CUDA, for a project in C++20 on
# any machine (a login node or CI without a GPU too): the CUDA toolkit (a CUDA LibTorch calls
# enable_language(CUDA) and needs nvcc), CUDA compiled as C++17 (Torch copies the C++ standard to
# CUDA, and nvcc lacks C++20), an arch list (else Torch probes the installed GPUs with try_run,
# which fails without one), and CUDA::nvToolsExt for CUDA >= 12.9, which ships only nvtx3 (header-
# only). It sets only what the caller has not, so including it twice changes nothing. Included by
# cmake/LibTorch.cmake and, installed beside it, by ddpwConfig.cmake: a project using the package
# finds LibTorch as this build did.
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  # V100 (sm_70) needs CUDA <= 12; CUDA 13 starts at sm_75.
  if(CUDAToolkit_VERSION VERSION_GREATER_EQUAL 13)
    set(_ddpw_archs 80 90)
  else()
    set(_ddpw_archs 70 80 90)
  endif()
  # No CUDA source is compiled; Torch copies the C++ standard to CUDA, which nvcc lacks for C++20.
  if(NOT DEFINED CMAKE_CUDA_STANDARD)
    set(CMAKE_CUDA_STANDARD 17)
  endif()
  # Without an arch list Torch probes the installed GPUs with try_run, which fails on a machine
  # without one (login nodes, CI): name V100, A100 and H100 (sm_70, sm_80, sm_90) instead.
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    list(TRANSFORM _ddpw_archs REPLACE "([0-9])([0-9])" "\\1.\\2" OUTPUT_VARIABLE TORCH_CUDA_ARCH_LIST)
  endif()
  if(NOT TARGET CUDA::nvToolsExt AND TARGET CUDA::nvtx3)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
  endif()
endif()
