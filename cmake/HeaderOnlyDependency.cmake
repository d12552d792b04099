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
# The release archive is downloaded once into the set-up's home ($DDPW_HOME, default
# ~/.cache/ddp-workshop, folder downloads/) and taken from there, checked against URL_HASH, by
# every later configure: one on a login node (network) is enough for the build folders configured
# later on compute nodes (no network), with no extra flag. Elsewhere offline (CI without the release
# host): -DFETCHCONTENT_SOURCE_DIR_<NAME>=<dir> with <dir>/<INCLUDE_DIR>/<HEADER> (an unpacked release)
# replaces the archive; <NAME> is <Name> in upper case. Only the headers are used: the archive's own
# CMake project is not run.
# Appends "<Name> <version> (<where from>)" to the global property DDPW_DEPENDENCIES.
include_guard(GLOBAL)
include(FetchContent)

# _ddpw_kept_archive(<Name> <url> <ALGO=hash> <install hint> <out archive> <out from>): the path of
# the release archive in the set-up's downloads/ folder, downloading it there first unless a copy
# with that hash is there already; where that folder cannot be written, the build folder's.
function(_ddpw_kept_archive name url url_hash install_hint out_archive out_from)
  string(TOUPPER "${name}" upper)
  if(NOT url_hash MATCHES "^([A-Za-z0-9_]+)=([0-9A-Fa-f]+)$")
    message(FATAL_ERROR "ddpw_header_only_dependency(${name}): URL_HASH must be <ALGO>=<hex>, not '${url_hash}'")
  endif()
  set(algo "${CMAKE_MATCH_1}")
  string(TOLOWER "${CMAKE_MATCH_2}" want)
  if(NOT "$ENV{DDPW_HOME}" STREQUAL "")
    set(kept "$ENV{DDPW_HOME}/downloads")
  else()
    set(kept "$ENV{HOME}/.cache/ddp-workshop/downloads")
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" -E make_directory "${kept}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  get_filename_component(base "${url}" NAME)
  if(rc EQUAL 0 AND NOT EXISTS "${kept}/${name}-${base}")
    # A folder that is there but not this user's to write (an instructor's shared DDPW_HOME): nothing
    # could be kept in it.
    execute_process(COMMAND test -w "${kept}" RESULT_VARIABLE rc)
  endif()
  if(NOT rc EQUAL 0 OR NOT IS_DIRECTORY "${kept}")
    message(STATUS "${name}: ${kept} cannot be written: its archive stays in this build folder")
    set(kept "${CMAKE_BINARY_DIR}/_deps/downloads")
    file(MAKE_DIRECTORY "${kept}")
  endif()
  get_filename_component(base "${url}" NAME)
  set(archive "${kept}/${name}-${base}")
  if(EXISTS "${archive}")
    file(${algo} "${archive}" have)
    if(have STREQUAL want)
      set(${out_archive} "${archive}" PARENT_SCOPE)
      set(${out_from} "${url}, kept in ${archive}" PARENT_SCOPE)
      return()
    endif()
    message(STATUS "${name}: ${archive} is not the release (its ${algo} differs): downloading it again")
  endif()
  message(STATUS "${name} is not installed: downloading ${url} into ${kept} (once: later configures, "
                 "also without network, take it from there; or install it: ${install_hint})")
  # A partial file of our own (never the kept name), renamed once complete and checked.
  string(RANDOM LENGTH 8 tag)
  set(part "${archive}.${tag}.part")
  file(DOWNLOAD "${url}" "${part}" STATUS status TLS_VERIFY ON TIMEOUT 300 INACTIVITY_TIMEOUT 30)
  list(GET status 0 code)
  list(GET status 1 why)
  set(have "")
  if(code EQUAL 0)
    file(${algo} "${part}" have)
  endif()
  if(NOT code EQUAL 0 OR NOT have STREQUAL want)
    file(REMOVE "${part}")
    if(code EQUAL 0)
      set(why "it has ${algo} ${have}, not ${want}")
    endif()
    message(FATAL_ERROR
      "${name} is not installed, and its release could not be downloaded from ${url} (${why}).\n"
      "Fix, one of:\n"
      "  - configure once where there is network (the login node): the archive is kept in ${kept}, and "
      "every later configure takes it from there, also without network (a compute node);\n"
      "  - copy the release archive there yourself, as ${archive} (${algo} ${want});\n"
      "  - -DFETCHCONTENT_SOURCE_DIR_${upper}=<an unpacked ${name} release>;\n"
      "  - install it: ${install_hint}.")
  endif()
  file(RENAME "${part}" "${archive}")
  set(${out_archive} "${archive}" PARENT_SCOPE)
  set(${out_from} "${url}, kept in ${archive}" PARENT_SCOPE)
endfunction()

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

  set(archive "${arg_URL}")
  if(FETCHCONTENT_SOURCE_DIR_${upper})
    set(from "the source tree FETCHCONTENT_SOURCE_DIR_${upper}=${FETCHCONTENT_SOURCE_DIR_${upper}}")
  else()
    _ddpw_kept_archive(${name} "${arg_URL}" "${arg_URL_HASH}" "${arg_INSTALL_HINT}" archive from)
  endif()
  if(POLICY CMP0135)
    cmake_policy(SET CMP0135 NEW)  # extracted files get the extraction time: rebuilds stay correct
  endif()
  # SOURCE_SUBDIR names a folder the archive does not have, so MakeAvailable only unpacks: the
  # library's own CMake project (tests, install rules, options) stays out of ours.
  FetchContent_Declare(${name} URL "${archive}" URL_HASH "${arg_URL_HASH}" SOURCE_SUBDIR ddpw-headers-only)
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
