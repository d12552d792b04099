# defines: ddpw_header_only_dependency — find a header-only library where it is installed, else
# fetch its release at configure time (a login node without root has no apt-get).
#
#   ddpw_header_only_dependency(<Name>
#     VERSION <oldest accepted>           find_package(<Name> <VERSION> CONFIG)
#     TARGET <target>                     the target the project links, e.g. CLI11::CLI11
#     URL <release archive> URL_HASH <ALGO=hash>
#     INCLUDE_DIR <dir>                   where the headers lie inside the archive, e.g. include
#     HEADER <file>                       one header under INCLUDE_DIR, checked, e.g. CLI/CLI.hpp
#     INSTALL_HINT <text>)                how to install it instead (named in messages)
#
# Offline (a compute node, CI without the release host): -DFETCHCONTENT_SOURCE_DIR_<NAME>=<dir>
# with <dir>/<INCLUDE_DIR>/<HEADER> (an unpacked release) replaces the download; <NAME> is <Name>
# in upper case. Only the headers are used: the archive's own CMake project is not run.
# Appends "<Name> <version> (<where from>)" to the global property DDPW_DEPENDENCIES.
include_guard(GLOBAL)
include(FetchContent)

function(ddpw_header_only_dependency name)
  cmake_parse_arguments(arg "" "VERSION;TARGET;URL;URL_HASH;INCLUDE_DIR;HEADER;INSTALL_HINT" "" ${ARGN})
  foreach(required VERSION TARGET URL URL_HASH INCLUDE_DIR HEADER INSTALL_HINT)
    if(NOT arg_${required})
      message(FATAL_ERROR "ddpw_header_only_dependency(${name}): ${required} is missing")
    endif()
  endforeach()
  string(TOUPPER "${name}" upper)

  # An explicit source tree wins over an installed copy: it is what the user asked for.
  if(NOT FETCHCONTENT_SOURCE_DIR_${upper})
    find_package(${name} ${arg_VERSION} CONFIG QUIET)
    if(${name}_FOUND AND TARGET ${arg_TARGET})
      set_property(GLOBAL APPEND PROPERTY DDPW_DEPENDENCIES "${name} ${${name}_VERSION} (installed: ${${name}_DIR})")
      return()
    endif()
  endif()

  if(FETCHCONTENT_SOURCE_DIR_${upper})
    set(from "the source tree FETCHCONTENT_SOURCE_DIR_${upper}=${FETCHCONTENT_SOURCE_DIR_${upper}}")
  else()
    set(from "${arg_URL}")
    message(STATUS "${name} >= ${arg_VERSION} is not installed: fetching ${arg_URL}\n"
                   "   (offline: -DFETCHCONTENT_SOURCE_DIR_${upper}=<an unpacked ${name} release>; "
                   "or install it: ${arg_INSTALL_HINT})")
  endif()
  if(POLICY CMP0135)
    cmake_policy(SET CMP0135 NEW)  # extracted files get the extraction time: rebuilds stay correct
  endif()
  # SOURCE_SUBDIR names a folder the archive does not have, so MakeAvailable only unpacks: the
  # library's own CMake project (tests, install rules, options) stays out of ours.
  FetchContent_Declare(${name} URL "${arg_URL}" URL_HASH "${arg_URL_HASH}" SOURCE_SUBDIR ddpw-headers-only)
  FetchContent_MakeAvailable(${name})
  string(TOLOWER "${name}" lower)
  set(include_dir "${${lower}_SOURCE_DIR}/${arg_INCLUDE_DIR}")
  if(NOT EXISTS "${include_dir}/${arg_HEADER}")
    message(FATAL_ERROR "${name}: ${include_dir}/${arg_HEADER} does not exist (from ${from}).\n"
                        "Fix: point FETCHCONTENT_SOURCE_DIR_${upper} at an unpacked ${name} release "
                        "(it holds ${arg_INCLUDE_DIR}/${arg_HEADER}), or install it: ${arg_INSTALL_HINT}")
  endif()
  add_library(${arg_TARGET} INTERFACE IMPORTED GLOBAL)  # imported: its headers are system headers
  target_include_directories(${arg_TARGET} INTERFACE "${include_dir}")
  set_property(GLOBAL APPEND PROPERTY DDPW_DEPENDENCIES "${name} (fetched: ${from})")
endfunction()
