# Finds LibTorch, in this order:
#   1. an explicit Torch_DIR or CMAKE_PREFIX_PATH (a libtorch archive, a cluster module);
#   2. the active Python's torch (python3 on PATH, or -DPython3_EXECUTABLE=...);
#   3. the torch that scripts/setup.sh installed ($DDPW_HOME, default ~/.cache/ddp-workshop);
#   4. the system (/usr, /usr/local).
# Stops with a fix-it message when none is found, or when it lies outside the versions the library
# builds with (DDPW_OLDEST_TORCH to DDPW_NEWEST_TORCH). Sets DDPW_TORCH_CUDA (ON when
# this LibTorch has CUDA, so the CUDA/NCCL code is compiled even on a machine without a GPU),
# DDPW_NCCL (the NCCL backend is built; its nccl.h and the CUDA toolkit are checked against
# LibTorch's, cmake/CudaStack.cmake) and DDPW_GLOO (Gloo's headers were found: CPU ranks can run).

function(_ddpw_torch_prefix_from_python python out)
  execute_process(
    COMMAND "${python}" -c "import torch, sys; sys.stdout.write(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE prefix RESULT_VARIABLE rc ERROR_VARIABLE error)
  if(rc EQUAL 0 AND EXISTS "${prefix}/Torch/TorchConfig.cmake")
    set(${out} "${prefix}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
    # Why not, for the message: the last line of Python's error (e.g. "No module named 'torch'").
    string(STRIP "${error}" error)
    string(REGEX REPLACE ".*\n" "" error "${error}")
    set(_ddpw_python_error "${error}" PARENT_SCOPE)
  endif()
endfunction()

# _ddpw_closed_folder(<path> <out>): the first folder on the way to <path> (following its links as far
# as this user can) that this user cannot enter, with its owner and mode; empty if none.
function(_ddpw_closed_folder path out)
  set(${out} "" PARENT_SCOPE)
  foreach(hop RANGE 8)
    get_filename_component(dir "${path}" DIRECTORY)
    set(walk "${dir}")
    set(chain "")
    while(NOT walk STREQUAL "/" AND NOT walk STREQUAL "")
      list(PREPEND chain "${walk}")
      get_filename_component(walk "${walk}" DIRECTORY)
    endwhile()
    foreach(folder IN LISTS chain)
      execute_process(COMMAND test -e "${folder}" RESULT_VARIABLE missing)
      if(NOT missing EQUAL 0)
        return()  # every folder above it can be entered: it is not there
      endif()
      execute_process(COMMAND test -x "${folder}" RESULT_VARIABLE closed)
      if(NOT closed EQUAL 0)
        execute_process(COMMAND stat -c "owner %U, mode %a" "${folder}" OUTPUT_VARIABLE how
                        OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        set(${out} "${folder} (${how})" PARENT_SCOPE)
        return()
      endif()
    endforeach()
    if(NOT IS_SYMLINK "${path}")
      return()
    endif()
    file(READ_SYMLINK "${path}" target)
    if(NOT IS_ABSOLUTE "${target}")
      set(target "${dir}/${target}")
    endif()
    set(path "${target}")
  endforeach()
endfunction()

set(_ddpw_torch_source "")
if(Torch_DIR AND DEFINED CACHE{_DDPW_TORCH_FOUND_DIR} AND Torch_DIR STREQUAL _DDPW_TORCH_FOUND_DIR)
  # A reconfigure: find_package cached the Torch_DIR found the first time; say where that came from.
  set(_ddpw_torch_source "${_DDPW_TORCH_FOUND_SOURCE}")
elseif(Torch_DIR OR CMAKE_PREFIX_PATH)
  set(_ddpw_torch_source "explicit Torch_DIR/CMAKE_PREFIX_PATH")
else()
  if(DEFINED Python3_EXECUTABLE)
    set(_ddpw_python "${Python3_EXECUTABLE}")
  else()
    find_program(_ddpw_python NAMES python3 python)
  endif()
  # What was looked at and why it gave no LibTorch, for the message if nothing does.
  set(_ddpw_looked "")
  if(_ddpw_python)
    _ddpw_torch_prefix_from_python("${_ddpw_python}" _ddpw_prefix)
    if(_ddpw_prefix)
      set(_ddpw_torch_source "the torch of ${_ddpw_python}")
    else()
      list(APPEND _ddpw_looked "the active python ${_ddpw_python} (${_ddpw_python_error})")
    endif()
  endif()
  if(NOT _ddpw_prefix)
    if(DEFINED ENV{DDPW_HOME})
      set(_ddpw_home "$ENV{DDPW_HOME}")
    else()
      set(_ddpw_home "$ENV{HOME}/.cache/ddp-workshop")
    endif()
    # The set-up's venv: none; one this user cannot run (its python a link into a folder they cannot
    # enter: a venv made from root's pyenv, say); one whose python runs without torch.
    set(_ddpw_venv_python "${_ddpw_home}/venv/bin/python3")
    execute_process(COMMAND id -un OUTPUT_VARIABLE _ddpw_user OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    set(_ddpw_venv_problem "")
    if(EXISTS "${_ddpw_venv_python}")
      _ddpw_torch_prefix_from_python("${_ddpw_venv_python}" _ddpw_prefix)
      if(_ddpw_prefix)
        set(_ddpw_torch_source "the set-up's torch in ${_ddpw_home}/venv")
      else()
        set(_ddpw_venv_problem "its python runs but gives no torch: ${_ddpw_python_error}")
      endif()
    elseif(IS_SYMLINK "${_ddpw_venv_python}")
      file(READ_SYMLINK "${_ddpw_venv_python}" _ddpw_target)
      _ddpw_closed_folder("${_ddpw_venv_python}" _ddpw_closed)
      if(_ddpw_closed)
        string(CONCAT _ddpw_venv_problem "its python3 is a link to ${_ddpw_target}, behind ${_ddpw_closed}, "
                                         "a folder you (${_ddpw_user}) cannot enter")
      else()
        set(_ddpw_venv_problem "its python3 is a link to ${_ddpw_target}, which does not exist")
      endif()
    elseif(EXISTS "${_ddpw_home}/venv")
      set(_ddpw_venv_problem "it has no bin/python3")
    else()
      _ddpw_closed_folder("${_ddpw_venv_python}" _ddpw_closed)
      if(_ddpw_closed)
        set(_ddpw_venv_problem "you (${_ddpw_user}) cannot look into it: ${_ddpw_closed} is closed to you")
      endif()
    endif()
    if(_ddpw_venv_problem)
      list(APPEND _ddpw_looked "the set-up's venv ${_ddpw_home}/venv, which you cannot use: ${_ddpw_venv_problem}")
    elseif(NOT _ddpw_prefix)
      list(APPEND _ddpw_looked "the set-up's venv ${_ddpw_home}/venv (there is none: DDPW_HOME names where scripts/setup.sh put it)")
    endif()
  endif()
  if(_ddpw_prefix)
    list(APPEND CMAKE_PREFIX_PATH "${_ddpw_prefix}")
  else()
    list(APPEND _ddpw_looked "the system (/usr, /usr/local)")
    list(JOIN _ddpw_looked ";\n  " _ddpw_looked)
    set(_ddpw_torch_source "the system")
  endif()
endif()

# What a CUDA-enabled LibTorch needs before find_package(Torch) (also installed with the package,
# so that a project using it finds LibTorch the same way).
include("${CMAKE_CURRENT_LIST_DIR}/TorchCudaSetup.cmake")

find_package(Torch CONFIG QUIET)
if(NOT Torch_FOUND)
  if(_ddpw_venv_problem)
    # A venv is there but cannot serve: no other fix matters as much as this one.
    message(FATAL_ERROR
      "LibTorch was not found: the set-up's venv in ${_ddpw_home} cannot serve you. Looked at:\n  ${_ddpw_looked}.\n"
      "Fix it in one of these ways:\n"
      "  - if ${_ddpw_home} is your instructor's shared install: they make it again, usable by all, with\n"
      "    scripts/setup.sh --shared ${_ddpw_home} (it uses the system's python3, which every user can run);\n"
      "  - otherwise run scripts/setup.sh (it says what is wrong with the venv), or configure with DDPW_HOME\n"
      "    set to a working install, or with -DCMAKE_PREFIX_PATH=/path/to/libtorch.")
  endif()
  if(NOT _ddpw_looked)
    set(_ddpw_looked "${_ddpw_torch_source}")
  endif()
  message(FATAL_ERROR
    "LibTorch was not found. Looked at:\n  ${_ddpw_looked}.\n"
    "Fix it in one of these ways:\n"
    "  - in a room with a shared install: export DDPW_HOME=<the folder your instructor names>, or\n"
    "  - run scripts/setup.sh (installs the torch wheel, about 4.7 GB, into ~/.cache/ddp-workshop), or\n"
    "  - pip install torch, and configure with that python3 on PATH, or\n"
    "  - point at a libtorch: cmake -DCMAKE_PREFIX_PATH=/path/to/libtorch ..., or\n"
    "  - on a cluster: module load the site's pytorch module before cmake.")
endif()

# The LibTorch versions the library builds with: 2.10 to 2.15, each built and tested (docs/tests.md,
# scripts/test --torch VERSION). What differs between them lives in ddp/detail/torch_compat.h. Outside
# the window the configure stops: 1.x's API differs throughout (no zero_grad(set_to_none), Backend vs
# ProcessGroup, a torchrun store protocol 2.x launchers do not speak), an older 2.x was never tried,
# and a newer release changes the C++ API the library uses (2.13 changed autograd's node pointers):
# supporting one means its entry in torch_compat.h and DDPW_NEWEST_TORCH here. The package's config
# (ddpwConfig.cmake) checks the same window.
set(DDPW_OLDEST_TORCH 2.10)
set(DDPW_NEWEST_TORCH 2.15)
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _ddpw_torch_minor "${Torch_VERSION}")
if(_ddpw_torch_minor AND (_ddpw_torch_minor VERSION_LESS DDPW_OLDEST_TORCH OR _ddpw_torch_minor VERSION_GREATER DDPW_NEWEST_TORCH))
  if(_ddpw_torch_minor VERSION_LESS DDPW_OLDEST_TORCH)
    set(_ddpw_torch_side "older than ${DDPW_OLDEST_TORCH}, the oldest")
  else()
    set(_ddpw_torch_side "newer than ${DDPW_NEWEST_TORCH}, the newest")
  endif()
  message(FATAL_ERROR
    "LibTorch ${Torch_VERSION} (from ${_ddpw_torch_source}) is ${_ddpw_torch_side} this library builds with "
    "(torch ${DDPW_OLDEST_TORCH} to ${DDPW_NEWEST_TORCH}).\n"
    "Fix: a torch from ${DDPW_OLDEST_TORCH} to ${DDPW_NEWEST_TORCH}: scripts/setup.sh installs the set-up's default into "
    "~/.cache/ddp-workshop (DDPW_TORCH=${DDPW_NEWEST_TORCH}.0 scripts/setup.sh for the newest, or any version in the "
    "window), then configure a fresh build folder (its python3 first on PATH, or DDPW_HOME); or module load a "
    "site's pytorch module in the window.")
endif()

set(_DDPW_TORCH_FOUND_DIR "${Torch_DIR}" CACHE INTERNAL "the Torch_DIR this build found")
set(_DDPW_TORCH_FOUND_SOURCE "${_ddpw_torch_source}" CACHE INTERNAL "where that Torch_DIR came from")

set(DDPW_TORCH_VERSION "${Torch_VERSION}")
if(NOT DDPW_TORCH_VERSION)
  set(DDPW_TORCH_VERSION "unknown")
endif()
if(TARGET torch_cuda OR CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES)
  set(DDPW_TORCH_CUDA ON)
else()
  set(DDPW_TORCH_CUDA OFF)
endif()
message(STATUS "ddp-workshop: LibTorch ${DDPW_TORCH_VERSION} from ${_ddpw_torch_source} "
               "(CUDA: ${DDPW_TORCH_CUDA})")

# NCCL's header is not on Torch's include path: the wheel ships it in nvidia/nccl, the CUDA toolkit
# or a cluster module in their include folders. Without it the NCCL backend cannot be compiled.
set(DDPW_NCCL OFF)
if(DDPW_TORCH_CUDA)
  get_filename_component(_ddpw_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  find_path(DDPW_NCCL_INCLUDE_DIR nccl.h
    HINTS "$ENV{NCCL_HOME}/include" "${_ddpw_site}/nvidia/nccl/include" ${CUDAToolkit_INCLUDE_DIRS})
  if(DDPW_NCCL_INCLUDE_DIR)
    set(DDPW_NCCL ON)
  else()
    message(FATAL_ERROR "LibTorch has CUDA but nccl.h was not found, so the NCCL backend cannot be "
                        "built. Set NCCL_HOME (or module load nccl), or pip install nvidia-nccl-cu13.")
  endif()
  # One CUDA stack per process: nccl.h and the toolkit must be LibTorch's versions.
  if(NOT DEFINED DDPW_OTHER_CUDA_TOOLKIT AND DEFINED ENV{DDPW_OTHER_CUDA_TOOLKIT})
    set(DDPW_OTHER_CUDA_TOOLKIT "$ENV{DDPW_OTHER_CUDA_TOOLKIT}")  # the build tests' fresh trees too
  endif()
  option(DDPW_OTHER_CUDA_TOOLKIT "accept a CUDA toolkit of another major version than LibTorch's: a CPU-only build" OFF)
  include(CudaStack)
  find_library(DDPW_TORCH_CUDA_LIBRARY torch_cuda PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
  ddpw_probe_torch_cuda_stack("${DDPW_TORCH_CUDA_LIBRARY}")
  ddpw_nccl_header_version("${DDPW_NCCL_INCLUDE_DIR}" DDPW_NCCL_HEADER_VERSION)
  ddpw_check_cuda_stack(
    TORCH_NCCL "${DDPW_TORCH_NCCL_VERSION}" LOADED_NCCL "${DDPW_LOADED_NCCL_VERSION}"
    HEADER_NCCL "${DDPW_NCCL_HEADER_VERSION}" HEADER_DIR "${DDPW_NCCL_INCLUDE_DIR}"
    TORCH_CUDA "${DDPW_TORCH_CUDART_VERSION}" TOOLKIT_CUDA "${CUDAToolkit_VERSION}" TOOLKIT_DIR "${CUDAToolkit_BIN_DIR}")
  message(STATUS "ddp-workshop: NCCL ${DDPW_NCCL_HEADER_VERSION} (${DDPW_NCCL_INCLUDE_DIR}/nccl.h; LibTorch's: "
                 "${DDPW_TORCH_NCCL_VERSION}), CUDA toolkit ${CUDAToolkit_VERSION} (LibTorch's runtime: "
                 "${DDPW_TORCH_CUDART_VERSION})")
endif()

# Gloo's headers: c10d's ProcessGroupGloo.hpp includes them, but no LibTorch ships them. Only their
# declarations are used (the Gloo code itself lives in libtorch_cpu), so the headers of Debian's
# libgloo-dev serve. Without them the build has no Gloo backend (ddp/detail/no_gloo_backend.cpp): a GPU
# build still runs every step with NCCL, but CPU ranks (--device cpu, --backend gloo) stop at
# start-up and say how to get Gloo.
set(DDPW_GLOO_FIX "apt-get install libgloo-dev (scripts/setup.sh does, as root), or without root configure with "
                  "-DDDPW_GLOO_INCLUDE_DIR=<a folder with gloo/algorithm.h and gloo/config.h>, e.g. the usr/include "
                  "of Debian's libgloo-dev unpacked with dpkg -x")
string(JOIN "" DDPW_GLOO_FIX ${DDPW_GLOO_FIX})
find_path(DDPW_GLOO_INCLUDE_DIR gloo/algorithm.h
  HINTS "$ENV{GLOO_HOME}/include" ${TORCH_INCLUDE_DIRS})
if(DDPW_GLOO_INCLUDE_DIR)
  set(DDPW_GLOO ON)
elseif(DDPW_NCCL)
  set(DDPW_GLOO OFF)
  message(WARNING "gloo/algorithm.h was not found: this is a GPU-only build (NCCL only, no Gloo). "
                  "Runs on CPU ranks (--device cpu, --backend gloo) will stop with a message. For them: "
                  "${DDPW_GLOO_FIX}.")
else()
  message(FATAL_ERROR "gloo/algorithm.h was not found, and LibTorch ${DDPW_TORCH_VERSION} has no CUDA: "
                      "without Gloo's headers no backend is left (c10d's Gloo backend header needs them; "
                      "LibTorch does not ship them). Fix: ${DDPW_GLOO_FIX}.")
endif()
