# defines: ddpw_warnings — the warnings every target of the project compiles with: one INTERFACE
# target that each target links PRIVATE (ddpw_add_program does it for the programs), and
# ddpw_check_warnings(<dir>) that stops the configure when a target under <dir> lacks it.
# DDPW_WERROR (OFF by default; scripts/test and the ci preset turn it on) makes them errors: a
# learner's newer compiler may warn about something new, and that must not break their build. The
# sanitize preset leaves it off: with -fsanitize=address GCC 12 reports -Wmaybe-uninitialized
# inside libstdc++'s <regex> (a known false positive of instrumented code).
#
# Chosen by building everything with a wider set (GCC 12, LibTorch 2.11) and keeping what the code
# can meet without noise. Left out: -Wconversion/-Wsign-conversion (49 sites of int64_t/size_t
# mixing that casts would only clutter), -Wnull-dereference (false positives inside libstdc++ at
# -O3), -Wuseless-cast (whether a cast to long long is useless depends on the platform's int64_t),
# -Wmissing-declarations (every step program's worker() and the tests' helpers), -Wdouble-promotion
# (float figures printed as double in the benchmarks). LibTorch, CLI11, GoogleTest, nlohmann_json,
# Gloo and NCCL are SYSTEM include folders (imported targets, or marked so): their headers warn
# about nothing here.
include_guard(GLOBAL)

option(DDPW_WERROR "Treat compiler warnings as errors (CI)" OFF)

add_library(ddpw_warnings INTERFACE)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(ddpw_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wformat=2 -Wimplicit-fallthrough -Wextra-semi)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")  # GCC only (clang: "unknown warning option")
    target_compile_options(ddpw_warnings INTERFACE -Wduplicated-cond -Wduplicated-branches -Wlogical-op)
  endif()
  if(DDPW_WERROR)
    target_compile_options(ddpw_warnings INTERFACE -Werror)
  endif()
elseif(DDPW_WERROR)
  message(FATAL_ERROR "DDPW_WERROR is ON, but ddpw_warnings knows no flags for ${CMAKE_CXX_COMPILER_ID}: "
                      "add them in cmake/Warnings.cmake, or configure with -DDDPW_WERROR=OFF")
endif()

# Every executable and library defined under <dir> (and its subfolders) links ddpw_warnings.
function(ddpw_check_warnings dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "EXECUTABLE|LIBRARY" AND NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(libraries ${target} LINK_LIBRARIES)
      # $<BUILD_INTERFACE:...>: the installed library's targets carry no trace of this project's warnings.
      if(NOT "ddpw_warnings" IN_LIST libraries AND NOT "$<BUILD_INTERFACE:ddpw_warnings>" IN_LIST libraries)
        message(FATAL_ERROR "target ${target} (${dir}) does not link ddpw_warnings. Fix: "
                            "target_link_libraries(${target} PRIVATE ddpw_warnings), or add it with ddpw_add_program()")
      endif()
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    ddpw_check_warnings("${subdirectory}")
  endforeach()
endfunction()
