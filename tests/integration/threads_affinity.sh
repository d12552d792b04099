#!/usr/bin/env bash
# Threads per rank follow the CPUs a run may use (ddp/threads.h), shown with their reason in the
# settings table: under `taskset -c 0` one thread, not one per core of the machine (main gave
# step 0 all the machine's cores there, and step 1's two workers half each of CPUs they could not
# use); OMP_NUM_THREADS is honoured up to the CPUs in the mask; --threads is used as given.
source "$(dirname "$0")/lib.sh"
command -v taskset >/dev/null || fail "taskset not found (util-linux)"
cpus=$(nproc)   # this process's affinity mask, like the programs' sched_getaffinity

# threads_row LOG: the value of the settings table's "threads per rank" row
threads_row() { sed -nE 's/^threads per rank +\| +(.*[^ ]) *$/\1/p' "$1"; }
# expect_threads NAME WANT CMD...: runs CMD (a short training) and compares the row with WANT
expect_threads() {
  local name=$1 want=$2; shift 2
  run_logged "$name.log" "$@" || { cat "$name.log"; fail "$name: exited non-zero"; }
  local got; got=$(threads_row "$name.log")
  [ "$got" = "$want" ] || { cat "$name.log"; fail "$name: threads per rank '$got', expected '$want'"; }
  echo "ok   $name: threads per rank $got"
}

first=$(taskset -pc $$ | sed -E 's/.*: *([0-9]+).*/\1/')   # a CPU this test may use
expect_threads step0-one-cpu "1 (1 CPU in the affinity mask)" \
  taskset -c "$first" "$BIN/step0_single_gpu" 1 1 --device cpu
expect_threads step1-one-cpu "1 (1 CPU in the affinity mask / 2 workers)" \
  taskset -c "$first" "$BIN/solutions/step1_multigpu_fork" 1 1 --device cpu --nproc 2
expect_threads step0-omp "1 (OMP_NUM_THREADS=8, capped: 1 CPU in the affinity mask)" \
  env OMP_NUM_THREADS=8 taskset -c "$first" "$BIN/step0_single_gpu" 1 1 --device cpu
expect_threads step0-requested "3 (--threads)" \
  taskset -c "$first" "$BIN/step0_single_gpu" 1 1 --device cpu --threads 3
if [ "$cpus" -ge 2 ]; then
  expect_threads step0-all "$cpus ($cpus CPUs in the affinity mask)" "$BIN/step0_single_gpu" 1 1 --device cpu
  expect_threads step0-omp-1 "1 (OMP_NUM_THREADS)" env OMP_NUM_THREADS=1 "$BIN/step0_single_gpu" 1 1 --device cpu
fi
pass "threads per rank follow the affinity mask, OMP_NUM_THREADS and --threads"
