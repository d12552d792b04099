#!/usr/bin/env bash
# A configure without network succeeds, with no extra flag, once CLI11 and nlohmann-json were
# downloaded once (the login node configures, the compute node builds). In a mount namespace where
# Debian's CLI11 and nlohmann-json are hidden, and a network namespace with no interface up:
#  1. cmake/HeaderOnlyDependency.cmake in a small project, its release "host" a folder here
#     (file:// URLs): the first configure downloads both archives into $DDPW_HOME/downloads; with
#     the host gone, a fresh build folder configures from those copies (checked by SHA-256); a
#     copy that is not the release is refused, naming the fix. The archives are made here from
#     Debian's installed headers (libcli11-dev 2.1.2, nlohmann-json3-dev 3.11.2), laid out as the
#     projects' release archives are; this machine cannot reach the release host, so the project's
#     own URLs and hashes cannot be used for the download itself.
#  2. the project itself, offline, with an empty downloads folder: the configure stops with the
#     fix (configure once where there is network; the exact file and hash to copy there).
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
torch_dir=${DDPW_TORCH_DIR:?DDPW_TORCH_DIR must be the Torch_DIR of the build}
PATH=$PATH:/usr/sbin:/sbin
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
has() { tr -s ' \n' ' ' <"$1" | grep -F -- "$2" >/dev/null; }  # CMake wraps its messages
[ "$(id -u)" -eq 0 ] || skip "needs root (mount and network namespaces)"
for tool in unshare mount ip tar xz sha256sum; do command -v "$tool" >/dev/null || skip "no $tool"; done
[ -f /usr/include/CLI/CLI.hpp ] && [ -f /usr/include/nlohmann/json.hpp ] ||
  skip "Debian's CLI11 and nlohmann-json headers are not installed (scripts/setup.sh installs them)"

tmp=$(mktemp -d /tmp/ddpw-offline.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/empty" "$tmp/host/CLI11-2.1.2/include" "$tmp/host/json/include" "$tmp/small"
# Release archives as the projects lay them out: CLI11-2.1.2/include/CLI/..., json/include/nlohmann/...
cp -r /usr/include/CLI "$tmp/host/CLI11-2.1.2/include/"
cp -r /usr/include/nlohmann "$tmp/host/json/include/"
tar -C "$tmp/host" -czf "$tmp/host/v2.1.2.tar.gz" CLI11-2.1.2
tar -C "$tmp/host" -cJf "$tmp/host/json.tar.xz" json
cli11_sha=$(sha256sum "$tmp/host/v2.1.2.tar.gz" | cut -d' ' -f1)
json_sha=$(sha256sum "$tmp/host/json.tar.xz" | cut -d' ' -f1)

cat >"$tmp/small/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.21)
project(offline LANGUAGES CXX)
list(APPEND CMAKE_MODULE_PATH "$root/cmake")
include(HeaderOnlyDependency)
ddpw_header_only_dependency(CLI11 VERSION 2.1 TARGET CLI11::CLI11
  URL file://$tmp/host/v2.1.2.tar.gz URL_HASH SHA256=$cli11_sha
  INCLUDE_DIR include HEADER CLI/CLI.hpp INSTALL_HINT "apt-get install libcli11-dev")
ddpw_header_only_dependency(nlohmann_json VERSION 3.9 TARGET nlohmann_json::nlohmann_json
  URL file://$tmp/host/json.tar.xz URL_HASH SHA256=$json_sha
  INCLUDE_DIR include HEADER nlohmann/json.hpp INSTALL_HINT "apt-get install nlohmann-json3-dev")
get_property(deps GLOBAL PROPERTY DDPW_DEPENDENCIES)
message(STATUS "dependencies: \${deps}")
file(WRITE "\${CMAKE_BINARY_DIR}/main.cpp" "#include <CLI/CLI.hpp>\\n#include <nlohmann/json.hpp>\\nint main() { return 0; }\\n")
add_executable(uses_both "\${CMAKE_BINARY_DIR}/main.cpp")
target_link_libraries(uses_both PRIVATE CLI11::CLI11 nlohmann_json::nlohmann_json)
CMAKE

# In the namespaces: the installed copies hidden, no network; then the steps, each logged.
cat >"$tmp/offline.sh" <<'STEPS'
set -uo pipefail
tmp=$1 root=$2 torch_prefix=$3
for hidden in /usr/include/CLI /usr/include/nlohmann /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json; do
  [ ! -d "$hidden" ] || mount --bind "$tmp/empty" "$hidden"
done
test ! -e /usr/include/CLI/CLI.hpp && test ! -e /usr/include/nlohmann/json.hpp || { echo "headers not hidden"; exit 3; }
echo "# network: $(ip -brief link | tr -s ' \n' ' ')"
run() {  # run NAME CMD...: exit code to NAME.rc, output to NAME.log
  local name=$1; shift
  "$@" >"$tmp/$name.log" 2>&1; echo $? >"$tmp/$name.rc"
}
export DDPW_HOME=$tmp/home
run first cmake -S "$tmp/small" -B "$tmp/build-first"
mv "$tmp/host" "$tmp/host-gone"   # the release host is gone, as from a compute node
run offline cmake -S "$tmp/small" -B "$tmp/build-offline"
run offline-build cmake --build "$tmp/build-offline"
printf 'not the release' >"$tmp/home/downloads/CLI11-v2.1.2.tar.gz"
run corrupt cmake -S "$tmp/small" -B "$tmp/build-corrupt"
# The project itself, offline, nothing downloaded yet.
DDPW_HOME=$tmp/home-empty run project cmake -S "$root" -B "$tmp/build-project" -DCMAKE_PREFIX_PATH="$torch_prefix/share/cmake" \
  -DDDPW_BUILD_TESTS=OFF
STEPS
torch_prefix=$(cd "$torch_dir/../../.." && pwd)
unshare --mount --net --propagation private bash "$tmp/offline.sh" "$tmp" "$root" "$torch_prefix" >"$tmp/ns.log" 2>&1 ||
  { cat "$tmp/ns.log"; fail "the namespace script failed"; }
cat "$tmp/ns.log"
grep -q '^# network: lo DOWN' "$tmp/ns.log" || fail "the namespace had a network"

rc() { cat "$tmp/$1.rc"; }
[ "$(rc first)" = 0 ] || { cat "$tmp/first.log"; fail "the first configure (release host reachable) failed"; }
for f in CLI11-v2.1.2.tar.gz nlohmann_json-json.tar.xz; do
  [ -f "$tmp/home/downloads/$f" ] || { cat "$tmp/first.log"; fail "the first configure did not keep $f in \$DDPW_HOME/downloads"; }
done
echo "ok: the first configure downloaded both archives into \$DDPW_HOME/downloads"
[ "$(rc offline)" = 0 ] || { cat "$tmp/offline.log"; fail "the configure without network or release host failed"; }
has "$tmp/offline.log" "dependencies: CLI11 (fetched: file://$tmp/host/v2.1.2.tar.gz, kept in $tmp/home/downloads/CLI11-v2.1.2.tar.gz)" ||
  { cat "$tmp/offline.log"; fail "CLI11 did not come from the kept archive"; }
has "$tmp/offline.log" "nlohmann_json (fetched: file://$tmp/host/json.tar.xz, kept in $tmp/home/downloads/nlohmann_json-json.tar.xz)" ||
  { cat "$tmp/offline.log"; fail "nlohmann_json did not come from the kept archive"; }
! grep -q 'downloading' "$tmp/offline.log" || { cat "$tmp/offline.log"; fail "the offline configure tried to download"; }
[ "$(rc offline-build)" = 0 ] || { cat "$tmp/offline-build.log"; fail "a program including both headers did not build"; }
echo "ok: offline, a fresh build folder configures from the kept archives (no flag) and a program using both builds"
[ "$(rc corrupt)" != 0 ] || fail "a kept archive that is not the release was used"
has "$tmp/corrupt.log" "is not the release (its SHA256 differs): downloading it again" &&
  has "$tmp/corrupt.log" "configure once where there is network (the login node)" &&
  has "$tmp/corrupt.log" "as $tmp/home/downloads/CLI11-v2.1.2.tar.gz (SHA256 $cli11_sha)" ||
  { cat "$tmp/corrupt.log"; fail "the refusal of a wrong archive does not name the fix"; }
echo "ok: a kept archive that is not the release is refused, naming the fix"
# The project: its real URL and hash, nothing kept, no network.
[ "$(rc project)" != 0 ] || { cat "$tmp/project.log"; fail "the project configured offline with nothing downloaded"; }
has "$tmp/project.log" "CLI11 is not installed, and its release could not be downloaded from https://" &&
  has "$tmp/project.log" "configure once where there is network (the login node): the archive is kept in $tmp/home-empty/downloads" &&
  has "$tmp/project.log" "as $tmp/home-empty/downloads/CLI11-v2.1.2.tar.gz (SHA256 " ||
  { cat "$tmp/project.log"; fail "the project's offline configure does not say how to fix it"; }
sed -n '/CLI11 is not installed, and/,/install it:/p' "$tmp/project.log"
echo "PASS: once downloaded, CLI11 and nlohmann-json configure without network and without a flag"
