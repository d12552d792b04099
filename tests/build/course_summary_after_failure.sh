#!/usr/bin/env bash
# scripts/course must print its summary when a step fails, and exit non-zero. Runs the real course
# script in a copy of scripts/ whose set-up, build and programs are stubs (seconds, no training):
# step 2's torchrun is missing, as on a fresh machine before the venv fix. Also: mpirun gets a
# free MASTER_PORT from the course, a different one per run (no fixed port).
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
tmp=$(mktemp -d /tmp/ddpw-course.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/tree/scripts" "$tmp/build/bin/solutions" "$tmp/stubs"
cp "$root/scripts/course" "$root/scripts/env.sh" "$tmp/tree/scripts/"
# shellcheck disable=SC2016  # the stub's own $0, expanded when the stub runs
printf '#!/bin/sh\necho "stub: $(basename "$0")"\n' >"$tmp/tree/scripts/setup.sh"
cp "$tmp/tree/scripts/setup.sh" "$tmp/tree/scripts/build.sh"
# A training program as the course sees it: epoch lines, rank 0's snapshot, a checksum per rank.
cat >"$tmp/build/bin/trainer" <<'STUB'
#!/bin/sh
echo "Epoch 0 | train loss 1.000 | test loss 1.0"
echo "Epoch 1 | train loss 0.500 | test loss 0.5"
echo "[CPU0] final weights checksum 42"
echo snapshot >snapshot.pt
STUB
cat >"$tmp/stubs/mpirun" <<'STUB'
#!/bin/sh
echo "mpirun stub: MASTER_PORT=${MASTER_PORT:-unset}" | tee -a "$MPIRUN_LOG"
for arg; do shift; case $arg in /*) exec "$arg" "$@" ;; esac; done  # skip mpirun's own options
echo "mpirun stub: no program given"; exit 2
STUB
chmod +x "$tmp/tree/scripts/"*.sh "$tmp/build/bin/trainer" "$tmp/stubs/mpirun"
for p in step0_single_gpu solutions/step1_multigpu_fork solutions/step2_env_launch; do
  ln -s "$tmp/build/bin/trainer" "$tmp/build/bin/$p"
done

# No torchrun and no slurmctld: step 2 fails, step 3 is skipped. The course puts /usr/sbin on PATH
# (scripts/env.sh: root's tools), so as root a mount namespace puts an empty folder over /usr/sbin
# and /sbin, where this machine's slurmctld is.
hide=()
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null; then
  mkdir "$tmp/empty"
  # shellcheck disable=SC2016  # expanded by the inner sh
  hide=(unshare --mount --propagation private sh -c \
        'for d in /usr/sbin /sbin; do [ -L "$d" ] || mount --bind "$0" "$d"; done && exec "$@"' "$tmp/empty")
fi
run_course() {
  "${hide[@]}" env -i HOME="$tmp" DDPW_HOME="$tmp/ddpw-home" DDPW_BUILD="$tmp/build" MPIRUN_LOG="$tmp/mpirun.log" \
    PATH="$tmp/stubs:/usr/bin:/bin" EPOCHS=2 SAVE_EVERY=1 timeout 60 "$tmp/tree/scripts/course" >"$1" 2>&1
}
for p in "$tmp/stubs/torchrun" /usr/bin/torchrun /bin/torchrun; do [ ! -e "$p" ] || { echo "SKIP: $p exists"; exit 77; }; done

rc=0
run_course "$tmp/run1.log" || rc=$?
cat "$tmp/run1.log"
echo "---- course exit code: $rc"
[ "$rc" -ne 0 ] || { echo "FAIL: the course exited 0 although step 2 failed"; exit 1; }
grep -q '==== summary' "$tmp/run1.log" || { echo "FAIL: no summary after a failed step"; exit 1; }
grep -qE '^step2 +\|.*FAILED \(127\)' "$tmp/run1.log" || { echo "FAIL: the summary does not show step 2 FAILED (127)"; exit 1; }
for s in step0 step1 step2-mpi; do
  grep -qE "^$s +\|.*1.000 -> 0.500 .*\| ok$" "$tmp/run1.log" || { echo "FAIL: the summary lacks $s's losses and ok"; exit 1; }
done
grep -q '^step3 .*skipped' "$tmp/run1.log" || { echo "FAIL: step 3 was not reported as skipped"; exit 1; }

run_course "$tmp/run2.log" || true
mapfile -t ports < <(sed -n 's/^mpirun stub: MASTER_PORT=//p' "$tmp/mpirun.log")
echo "mpirun's MASTER_PORT in the two runs: ${ports[*]}"
[ "${#ports[@]}" -eq 2 ] || { echo "FAIL: expected two mpirun runs"; exit 1; }
for p in "${ports[@]}"; do
  [[ "$p" =~ ^[0-9]+$ ]] && [ "$p" -ge 1024 ] && [ "$p" -le 65535 ] || { echo "FAIL: MASTER_PORT '$p' is not a free port"; exit 1; }
done
[ "${ports[0]}" != "${ports[1]}" ] || { echo "FAIL: both runs used port ${ports[0]}: a fixed port"; exit 1; }
echo "PASS: a failed step still prints the summary (exit $rc); mpirun gets a free port per run"
