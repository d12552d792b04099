#!/usr/bin/env bash
# A learner on a login node: no root, and neither CLI11 nor Gloo's headers installed. Configures the
# project as a new non-root user, in a mount namespace where /usr/include/CLI, /usr/include/gloo and
# CLI11's CMake package are hidden behind empty folders, and in a network namespace with no way out
# (nothing is downloaded). CLI11 then comes from the fetch path with its offline override
# (FETCHCONTENT_SOURCE_DIR_CLI11: a copy of the headers as an unpacked release), the build is NCCL
# only and says so, and the two sources that differ in such a build compile there: the course's
# options (CLI11 from the fetched release) and the library's Gloo stand-in (what a CPU rank of an
# NCCL-only build then says: the unit test NoGlooBackend.ACpuRankStopsNamingTheFix). The whole
# library is not compiled here: the main build compiles it, and in this tree it cost 4-8 minutes
# of the suite's 2 cores.
# LibTorch is the one this build uses, bind-mounted where the user can read it (as a module's).
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
torch_dir=${DDPW_TORCH_DIR:?DDPW_TORCH_DIR must be the Torch_DIR of the build}
PATH=$PATH:/usr/sbin:/sbin  # useradd, runuser: root's tools, not on every PATH
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
has() { tr -s ' \n' ' ' <"$1" | grep -F -- "$2" >/dev/null; }  # CMake wraps its messages
[ "$(id -u)" -eq 0 ] || skip "needs root (it creates a user and a mount namespace)"
for tool in unshare runuser useradd userdel mount ip; do command -v "$tool" >/dev/null || skip "no $tool"; done
[ -f /usr/include/CLI/CLI.hpp ] || skip "CLI11's headers are not installed here, nothing to hide (scripts/setup.sh installs them)"
torch_prefix=$(cd "$torch_dir/../../.." && pwd)  # <prefix>/share/cmake/Torch
[ -f "$torch_prefix/lib/libtorch_cuda.so" ] || skip "this build's LibTorch has no CUDA: without Gloo it would have no backend"
! grep -q '^#define DDPW_CPU_ONLY_BECAUSE' "${DDPW_BUILD_DIR:?}/include/ddp/config.h" 2>/dev/null ||
  skip "a CPU-only build (DDPW_OTHER_CUDA_TOOLKIT: LibTorch's CUDA is not the toolkit's): an NCCL-only build needs its CUDA"

tmp=$(mktemp -d /tmp/ddpw-login.XXXXXX)
user=ddpwlogin$$
cleanup() {
  userdel "$user" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
chmod 755 "$tmp"
mkdir -p "$tmp/home/src" "$tmp/empty" "$tmp/libtorch"
useradd --no-create-home --home-dir "$tmp/home" --user-group --shell /bin/bash "$user"

# The clone the learner has: tracked and new files, not the build outputs.
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$root" ls-files -z --cached --others --exclude-standard | tar -C "$root" --null -T - -cf - | tar -C "$tmp/home/src" -xf -
else
  tar -C "$root" --exclude='./build*' --exclude=./out -cf - . | tar -C "$tmp/home/src" -xf -
fi
# An unpacked CLI11 release, as a learner would download it elsewhere: include/CLI/*.hpp.
mkdir -p "$tmp/cli11-release/include"
cp -r /usr/include/CLI "$tmp/cli11-release/include/"
chown -R "$user:$user" "$tmp/home"

cat >"$tmp/as-learner.sh" <<'LEARNER'
set -euo pipefail
cd "$HOME"
test ! -e /usr/include/CLI/CLI.hpp && test ! -e /usr/include/gloo/algorithm.h && test ! -e /usr/share/cmake/CLI11/CLI11Config.cmake \
  || { echo "FAIL: the headers are not hidden"; exit 1; }
echo "# user $(id -un) (uid $(id -u)), CLI11 and Gloo headers hidden, network: $(ip -brief link | tr '\n' ' ')"
start=$(date +%s)
# Without optimization, batches or a precompiled header (-O0; one file, one object): what is checked
# here is where the headers come from and what the build says, not the code (the main build compiles
# it optimized).
cmake -S src -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" -DDDPW_LESSON_FLAGS= \
  -DDDPW_UNITY=OFF -DDDPW_PCH=OFF -DCMAKE_PREFIX_PATH="$LIBTORCH/share/cmake" -DFETCHCONTENT_SOURCE_DIR_CLI11="$CLI11_RELEASE" \
  >configure.log 2>&1 || { cat configure.log; echo "FAIL: configure"; exit 1; }
configured=$(date +%s)
nice cmake --build build --target course/CMakeFiles/ddpw_cli.dir/options.cpp.o \
  ddp/CMakeFiles/ddp.dir/detail/no_gloo_backend.cpp.o >build.log 2>&1 || { tail -50 build.log; echo "FAIL: build"; exit 1; }
built=$(date +%s)
echo "# configure $((configured - start)) s, the two objects $((built - configured)) s"
exit 0
LEARNER

# In the namespaces (as root): hide the headers, then become the learner.
rc=0
# shellcheck disable=SC2016  # the script runs inside the namespaces and expands its variables there
unshare --mount --net --propagation private bash -euo pipefail -c '
  ip link set lo up
  for hidden in /usr/include/CLI /usr/include/gloo /usr/share/cmake/CLI11; do
    [ ! -d "$hidden" ] || mount --bind "$1/empty" "$hidden"
  done
  mount --bind "$2" "$1/libtorch"
  runuser -u "$3" -- env -i HOME="$1/home" PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin \
    LIBTORCH="$1/libtorch/$(basename "$4")" CLI11_RELEASE="$1/cli11-release" bash "$1/as-learner.sh"
' bash "$tmp" "$(dirname "$torch_prefix")" "$user" "$torch_prefix" >"$tmp/learner.log" 2>&1 || rc=$?
cat "$tmp/learner.log"
[ "$rc" -eq 0 ] || fail "the learner's build failed (exit code $rc)"

h=$tmp/home
sed -n '/ddp-workshop summary/,/tests /p' "$h/configure.log"
grep -q 'backends      NCCL only' "$h/configure.log" || fail "the configure summary does not say NCCL only"
has "$h/configure.log" 'this is a GPU-only build (NCCL only, no Gloo)' || fail "no warning that Gloo is missing"
has "$h/configure.log" "CLI11 (fetched: the source tree FETCHCONTENT_SOURCE_DIR_CLI11=$tmp/cli11-release)" \
  || fail "CLI11 did not come from the fetch path's offline override"
grep -q "isystem $tmp/cli11-release/include" "$h/build/build.ninja" || fail "the build does not use the fetched CLI11"
grep -q 'detail/gloo_backend.cpp' "$h/build/build.ninja" && fail "an NCCL-only build compiles the Gloo backend"
echo "PASS: a non-root configure without CLI11 and Gloo installed works offline (NCCL only), and its CLI11 and Gloo stand-in compile"
