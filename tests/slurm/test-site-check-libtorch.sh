#!/bin/bash
# defines: test-site-check-libtorch.sh — scripts/site-check's LibTorch row (--env-only: no Slurm, no
#          job, no root), with the sites' real env.sh, a stand-in `module` (fake-module.sh) and a fake
#          torch: a python3 that answers site-check's probe with FAKE_TORCH_VERSION and a CMake prefix
#          (FAKE_TORCH_PREFIX), as a module's or a venv's torch would. The window is read from
#          cmake/LibTorch.cmake, as site-check reads it:
#   1. Delta, pytorch-conda/2.12's torch (2.12.1, CMake files on the host): PASS, naming the module,
#      the version and the prefix; exit 0.
#   2. the same module with a torch below the window (2.8.0, NCSA's pytorch-conda/2.8) and one above it:
#      FAIL with the fix (a torch in the window); exit 1.
#   3. Roihu, python-pytorch/2.10 whose CMake prefix is not on the host (CSC's container): FAIL naming
#      the private wheel and --torch-prefix; with --torch-prefix at an unpacked wheel: PASS, its version.
#   4. HiPerGator, the set-up's venv (DDPW_VENV): PASS, naming the venv; no venv and no torch: SKIP.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
tests=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$tests/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ddpw-site-check-libtorch.XXXXXX")
trap 'rm -rf "$work"' EXIT
oldest=$(sed -nE 's/^set\(DDPW_OLDEST_TORCH ([0-9.]+)\)$/\1/p' "$root/cmake/LibTorch.cmake")
newest=$(sed -nE 's/^set\(DDPW_NEWEST_TORCH ([0-9.]+)\)$/\1/p' "$root/cmake/LibTorch.cmake")
[ -n "$oldest" ] && [ -n "$newest" ] || fail "cmake/LibTorch.cmake sets no DDPW_OLDEST_TORCH/DDPW_NEWEST_TORCH"
python=$(command -v python3) || fail "python3 not found (site-check is Python)"

# A torch install's CMake files: TorchConfig.cmake and the version file pip's wheel carries.
cmake_files() {  # cmake_files PREFIX VERSION
  mkdir -p "$1/Torch"
  : > "$1/Torch/TorchConfig.cmake"
  echo "set(PACKAGE_VERSION \"$2\")" > "$1/Torch/TorchConfigVersion.cmake"
}
# The fake torch's python3 (the modules of fake-module.sh put DDPW_TEST_TORCH_BIN first on PATH).
mkdir -p "$work/torch/bin" "$work/venv/bin" "$work/plain/bin"
cat > "$work/torch/bin/python3" <<'EOF'
#!/bin/bash
# site-check's probe: version|CUDA|CMake prefix, then the architectures
echo "ddpw-torch|$FAKE_TORCH_VERSION|13.0|$FAKE_TORCH_PREFIX"
echo "ddpw-arch-list sm_80 sm_90"
EOF
cp "$work/torch/bin/python3" "$work/venv/bin/python3"
printf '#!/bin/bash\necho "ModuleNotFoundError: No module named torch" >&2\nexit 1\n' > "$work/plain/bin/python3"
chmod +x "$work"/*/bin/python3
cmake_files "$work/module-share-cmake" 2.12.1
export DDPW_TEST_TORCH_BIN=$work/torch/bin FAKE_TORCH_PREFIX=$work/module-share-cmake
export DDPW_HOME=$work/home DDPW_VENV=$work/no-venv
unset CMAKE_PREFIX_PATH Torch_DIR
# shellcheck source=tests/slurm/fake-module.sh
source "$tests/fake-module.sh"

check() {  # check SITE [SITE-CHECK ARGS...]: sets OUT and RC
  RC=0
  OUT=$(timeout 120 "$python" "$root/scripts/site-check" "$@" --env-only 2>&1) || RC=$?
  echo "$OUT"
}
expect_row() {  # expect_row RESULT PATTERN: the LibTorch row (grep -E on the rest)
  grep -Eq -- "^LibTorch +\| $1 +\| $2" <<< "$OUT" || fail "no row 'LibTorch | $1 | $2'"
}
expect_rc() { [ "$RC" = "$1" ] || fail "site-check exit $RC, expected $1"; }
window="in ${oldest//./\\.} to ${newest//./\\.} \(cmake/LibTorch\.cmake\)"

# 1. Delta: NCSA's module, in the window.
FAKE_TORCH_VERSION=2.12.1+cu130 check delta
expect_rc 0
expect_row PASS "module pytorch-conda/2\.12: torch 2\.12\.1\+cu130 \(CUDA 13\.0\), CMake files in $work/module-share-cmake/Torch; $window"

# 2. Below the window (NCSA's RH9.4 module is torch 2.8) and above it.
FAKE_TORCH_VERSION=2.8.0+cu128 check delta
expect_rc 1
expect_row FAIL "module pytorch-conda/2\.12: torch 2\.8\.0\+cu128 .*: outside ${oldest//./\\.} to ${newest//./\\.} .* \| a torch from $oldest to $newest: .*DDPW_TORCH=<version> scripts/setup.sh"
above="${newest%%.*}.$(( ${newest#*.} + 1 )).0"
FAKE_TORCH_VERSION=$above check delta
expect_rc 1
expect_row FAIL "module pytorch-conda/2\.12: torch ${above//./\\.} .*: outside"

# 3. Roihu: the module's CMake files only inside its container; the private wheel by --torch-prefix.
FAKE_TORCH_VERSION=2.10.0 FAKE_TORCH_PREFIX=/inside/the/container/torch/share/cmake check roihu
expect_rc 1
expect_row FAIL "module python-pytorch/2\.10 gives torch 2\.10\.0, but its CMake files \(/inside/the/container/torch/share/cmake\) are not on this host .* \| the private wheel as clusters/roihu/README\.md shows .*--torch-prefix"
cmake_files "$work/wheel/torch/share/cmake" 2.11.0
FAKE_TORCH_VERSION=2.10.0 FAKE_TORCH_PREFIX=/inside/the/container/torch/share/cmake \
  check roihu --torch-prefix "$work/wheel/torch/share/cmake"
expect_rc 0
expect_row PASS "the private install by CMAKE_PREFIX_PATH: torch 2\.11\.0, CMake files in $work/wheel/torch/share/cmake/Torch; module python-pytorch/2\.10 \(torch 2\.10\.0\) gives the jobs torchrun; $window"
check roihu --torch-prefix "$work/nothing-here"
expect_rc 1
expect_row FAIL "no TorchConfig.cmake under $work/nothing-here"

# 4. HiPerGator: the set-up's venv; none made yet and no torch on PATH.
FAKE_TORCH_VERSION=2.15.0+cu128 DDPW_VENV=$work/venv check hipergator
expect_row PASS "the set-up's venv \($work/venv\): torch 2\.15\.0\+cu128 .*; $window"
DDPW_TEST_TORCH_BIN=$work/plain/bin check hipergator
expect_row SKIP "the set-up's venv: none yet in $work/no-venv \| make it as clusters/hipergator/README\.md shows"
echo "PASS: scripts/site-check's LibTorch row: a module's torch in $oldest to $newest PASS, outside it FAIL with the fix, a module's CMake files not on the host FAIL naming the private wheel, which --torch-prefix checks"
