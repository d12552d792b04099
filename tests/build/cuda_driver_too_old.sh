#!/usr/bin/env bash
# A node whose NVIDIA driver is older than LibTorch's CUDA (cu130 on a driver of CUDA 12.4): the
# CUDA runtime then sees no GPU at all. On --device cuda the programs, hello and scripts/gpu-check
# stop at start-up naming the cause and the torch build to install, not "no GPU visible". This
# machine has no GPU and no driver: a stand-in libcuda.so.1 (built here, put first on
# LD_LIBRARY_PATH) answers the CUDA runtime's cuDriverGetVersion with 12040 and nothing else, which
# is what the runtime asks first; everything after it (the runtime's "insufficient driver", the
# library's verdict) is real. For gpu-check a stand-in nvidia-smi lists one GPU.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
bin=${DDPW_BIN:?DDPW_BIN must be the bin folder of the build}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
command -v cc >/dev/null || skip "no C compiler for the stand-in driver"
[ -x "$bin/step0_single_gpu" ] && [ -x "$bin/hello" ] || fail "build step0_single_gpu and hello first"
readelf -d "$bin/step0_single_gpu" | grep -q 'libtorch_cuda' || skip "this build's LibTorch has no CUDA"
! grep -q '^#define DDPW_CPU_ONLY_BECAUSE' "$bin/../include/ddp/config.h" 2>/dev/null ||
  skip "a CPU-only build (DDPW_OTHER_CUDA_TOOLKIT): its programs refuse every GPU before the driver is asked"

tmp=$(mktemp -d /tmp/ddpw-driver.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/driver" "$tmp/tools"
cat >"$tmp/driver.c" <<'C'
/* A driver of CUDA 12.4, as cuDriverGetVersion reports it; the runtime asks for its entry points
   through cuGetProcAddress, and finds this one only. */
#include <dlfcn.h>
#include <string.h>
int cuDriverGetVersion(int* version) { *version = 12040; return 0; }
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuGetProcAddress_v2(const char* symbol, void** fn, int version, unsigned long long flags, int* status) {
  (void)version; (void)flags;
  *fn = dlsym(RTLD_DEFAULT, symbol);
  if (status) *status = *fn ? 1 : 0;
  return *fn ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}
int cuGetProcAddress(const char* symbol, void** fn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, fn, version, flags, 0);
}
C
cc -shared -fPIC -o "$tmp/driver/libcuda.so.1" "$tmp/driver.c" -ldl
export LD_LIBRARY_PATH=$tmp/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset CUDA_VISIBLE_DEVICES   # all (none) of the node's GPUs: the driver decides

want_what='the NVIDIA driver supports CUDA up to 12.4, but this LibTorch \([0-9.]+\+cu13[0-9]\) is built for CUDA 13\.[0-9], which needs driver release 580 or newer \(nvidia-smi shows the driver.s CUDA version\)'
want_fix='fix: install the cu128 build of torch 2.11.0, which this driver runs, and build against its LibTorch in a fresh build folder; or ask the site for a newer driver; here: DDPW_TORCH=2.11.0 DDPW_TORCH_CUDA=cu128 scripts/setup.sh'
for program in step0_single_gpu hello; do
  rc=0
  args=(--device cuda); [ "$program" = step0_single_gpu ] && args=(1 1 --device cuda)
  (cd "$tmp" && timeout 60 "$bin/$program" "${args[@]}" 2>&1) >"$tmp/$program.log" || rc=$?
  [ "$rc" -ne 0 ] || { cat "$tmp/$program.log"; fail "$program ran on --device cuda with a driver too old"; }
  grep -Eq "error: $want_what" "$tmp/$program.log" && grep -Fq "$want_fix" "$tmp/$program.log" ||
    { cat "$tmp/$program.log"; fail "$program did not name the driver and the build to install"; }
  ! grep -q 'none is visible' "$tmp/$program.log" || { cat "$tmp/$program.log"; fail "$program said only that no GPU is visible"; }
done
grep -E "error: the NVIDIA driver" "$tmp/step0_single_gpu.log"
echo "ok: step 0 and hello stop at start-up naming the driver's CUDA and the cu128 build"

# gpu-check's preflight, on a node whose nvidia-smi lists a GPU.
cat >"$tmp/tools/nvidia-smi" <<'SMI'
#!/bin/sh
case "$*" in
  *-L*) echo "GPU 0: Stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *) echo "index, name, driver_version, pci.bus_id"; echo "0, Stand-in GPU, 550.00, 00000000:00:00.0" ;;
esac
SMI
chmod +x "$tmp/tools/nvidia-smi"
rc=0
PATH=$tmp/tools:$PATH DDPW_BUILD=${bin%/bin} timeout 300 "$root/scripts/gpu-check" >"$tmp/gpu-check.log" 2>&1 || rc=$?
run_dir=$(sed -n 's/^# .* GPU(s) visible; outputs in //p' "$tmp/gpu-check.log")
case $run_dir in "$root"/out/gpu-check-*) rm -rf "$run_dir" ;; esac   # its outputs: ours to remove
[ "$rc" -eq 2 ] || { cat "$tmp/gpu-check.log"; fail "gpu-check exited $rc, expected 2 (stopped by its preflight)"; }
grep -Eq "^gpu-check: LibTorch cannot run on this node: $want_what" "$tmp/gpu-check.log" &&
  grep -Fq "$want_fix" "$tmp/gpu-check.log" || { cat "$tmp/gpu-check.log"; fail "gpu-check did not stop naming the driver and the build"; }
! grep -q 'gpu tests' "$tmp/gpu-check.log" || { cat "$tmp/gpu-check.log"; fail "gpu-check ran its checks after a failed preflight"; }
echo "PASS: with a driver older than LibTorch's CUDA, step 0, hello and gpu-check stop at once naming the build to install"
