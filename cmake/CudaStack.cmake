# defines: the check that one CUDA stack meets in the programs: the nccl.h we compile against is the
# NCCL LibTorch was built with (ProcessGroupNCCL's Options change layout with the NCCL version, so
# another one corrupts memory), and the CUDA toolkit we link (CUDA::cudart) has LibTorch's major
# version (else two CUDA runtimes load into one process). A cluster's `module load nccl` or
# `module load cuda` of another version is the usual cause; the messages say which to load or unload.
#
#   ddpw_probe_torch_cuda_stack(<libtorch_cuda.so>)  sets DDPW_TORCH_NCCL_VERSION,
#       DDPW_LOADED_NCCL_VERSION, DDPW_TORCH_CUDART_VERSION ("" where the probe could not tell)
#   ddpw_nccl_header_version(<include dir> <out>)    NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH of its nccl.h
#   ddpw_check_cuda_stack(TORCH_NCCL v HEADER_NCCL v HEADER_DIR d LOADED_NCCL v TORCH_CUDA v TOOLKIT_CUDA v
#                         TOOLKIT_DIR d)                    stops the configure on a mismatch; with
#       DDPW_OTHER_CUDA_TOOLKIT on, accepts another CUDA major for a CPU-only build and sets
#       DDPW_CUDA_TOOLKIT_MISMATCH to what differs
include_guard(GLOBAL)

# Loads libtorch_cuda in a small program (cmake/probe_torch_cuda_stack.cpp): needs no GPU, ~2 s.
function(ddpw_probe_torch_cuda_stack torch_cuda_library)
  set(bindir "${CMAKE_BINARY_DIR}/CMakeFiles/ddpw_probe_torch_cuda_stack")
  try_run(run_rc compile_ok "${bindir}" "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/probe_torch_cuda_stack.cpp"
    LINK_LIBRARIES ${CMAKE_DL_LIBS}
    COMPILE_OUTPUT_VARIABLE compile_output
    RUN_OUTPUT_VARIABLE probe
    ARGS "${torch_cuda_library}")
  foreach(key torch_nccl loaded_nccl cudart)
    set(${key} "")
    if(probe MATCHES "${key} ([0-9]+\\.[0-9]+(\\.[0-9]+)?)")
      set(${key} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(NOT compile_ok OR NOT run_rc EQUAL 0)
    message(WARNING "could not load ${torch_cuda_library} to read LibTorch's NCCL and CUDA versions "
                    "(${probe}${compile_output}): the check that nccl.h and the CUDA toolkit match them is skipped")
  elseif(NOT torch_nccl OR NOT cudart)
    message(WARNING "${torch_cuda_library} did not tell its NCCL version (torch::cuda::nccl::version) or its "
                    "CUDA runtime (cudaRuntimeGetVersion): that part of the check that nccl.h and the CUDA "
                    "toolkit match LibTorch's is skipped")
  endif()
  set(DDPW_TORCH_NCCL_VERSION "${torch_nccl}" PARENT_SCOPE)
  set(DDPW_LOADED_NCCL_VERSION "${loaded_nccl}" PARENT_SCOPE)
  set(DDPW_TORCH_CUDART_VERSION "${cudart}" PARENT_SCOPE)
endfunction()

function(ddpw_nccl_header_version include_dir out)
  file(STRINGS "${include_dir}/nccl.h" defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  set(version "")
  foreach(part MAJOR MINOR PATCH)
    if(defines MATCHES "NCCL_${part} +([0-9]+)")
      list(APPEND version "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  list(JOIN version "." version)
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

function(_ddpw_major_minor version out)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" mm "${version}")
  set(${out} "${mm}" PARENT_SCOPE)
endfunction()

function(ddpw_check_cuda_stack)
  cmake_parse_arguments(arg "" "TORCH_NCCL;HEADER_NCCL;HEADER_DIR;LOADED_NCCL;TORCH_CUDA;TOOLKIT_CUDA;TOOLKIT_DIR" "" ${ARGN})
  _ddpw_major_minor("${arg_TORCH_NCCL}" torch_nccl)
  _ddpw_major_minor("${arg_HEADER_NCCL}" header_nccl)
  _ddpw_major_minor("${arg_LOADED_NCCL}" loaded_nccl)
  if(torch_nccl AND header_nccl AND NOT torch_nccl VERSION_EQUAL header_nccl)
    message(FATAL_ERROR
      "two NCCLs: ${arg_HEADER_DIR}/nccl.h is NCCL ${arg_HEADER_NCCL}, but LibTorch was built with NCCL "
      "${arg_TORCH_NCCL}. ProcessGroupNCCL's options differ in layout between NCCL versions: a program "
      "compiled against this header would corrupt memory.\n"
      "Fix: module unload nccl (a loaded NCCL module's headers come first), or module load the nccl "
      "module of version ${torch_nccl}, or set NCCL_HOME (or -DDDPW_NCCL_INCLUDE_DIR=) to an NCCL "
      "${torch_nccl}; the torch wheel ships its own in site-packages/nvidia/nccl. Then configure a "
      "fresh build folder.")
  endif()
  if(torch_nccl AND loaded_nccl AND NOT torch_nccl VERSION_EQUAL loaded_nccl)
    message(FATAL_ERROR
      "two NCCLs: LibTorch was built with NCCL ${arg_TORCH_NCCL} but, with this LD_LIBRARY_PATH, loads "
      "libnccl ${arg_LOADED_NCCL}.\n"
      "Fix: module unload nccl (its lib folder on LD_LIBRARY_PATH shadows LibTorch's own), or module "
      "load the nccl module of version ${torch_nccl}.")
  endif()
  string(REGEX MATCH "^[0-9]+" torch_cuda "${arg_TORCH_CUDA}")
  string(REGEX MATCH "^[0-9]+" toolkit_cuda "${arg_TOOLKIT_CUDA}")
  set(DDPW_CUDA_TOOLKIT_MISMATCH "" PARENT_SCOPE)
  if(torch_cuda AND toolkit_cuda AND NOT torch_cuda EQUAL toolkit_cuda AND DDPW_OTHER_CUDA_TOOLKIT)
    # Testing a torch release on a machine without its toolkit (no GPU): everything compiles against
    # this toolkit's headers, and the programs refuse every GPU (ddp/device.cpp).
    set(DDPW_CUDA_TOOLKIT_MISMATCH "the CUDA toolkit ${arg_TOOLKIT_CUDA} beside LibTorch's CUDA ${arg_TORCH_CUDA}"
        PARENT_SCOPE)
    message(WARNING
      "two CUDAs, accepted (DDPW_OTHER_CUDA_TOOLKIT=ON): the CUDA toolkit in ${arg_TOOLKIT_DIR} is "
      "${arg_TOOLKIT_CUDA}, LibTorch's is ${arg_TORCH_CUDA}. This is a CPU-only build: its programs refuse "
      "--device cuda. For GPUs, configure a fresh build folder with a CUDA ${torch_cuda} toolkit.")
  elseif(torch_cuda AND toolkit_cuda AND NOT torch_cuda EQUAL toolkit_cuda)
    message(FATAL_ERROR
      "two CUDAs: the CUDA toolkit in ${arg_TOOLKIT_DIR} is ${arg_TOOLKIT_CUDA}, but LibTorch uses CUDA "
      "${arg_TORCH_CUDA}. The programs would load both CUDA runtimes into one process.\n"
      "Fix: module unload cuda and module load the cuda module of version ${torch_cuda}.x (nvcc of CUDA "
      "${torch_cuda} first on PATH, or -DCUDAToolkit_ROOT=), or use a LibTorch built for CUDA "
      "${toolkit_cuda} (e.g. the site's pytorch module that matches its cuda module). Then configure a "
      "fresh build folder. (To test this LibTorch on the CPU only, on a machine without its toolkit: "
      "-DDDPW_OTHER_CUDA_TOOLKIT=ON, or that variable in the environment.)")
  endif()
endfunction()
