#!/usr/bin/env bash
# Fault: SIGTERM, or SIGUSR1 as `sbatch --signal=B:USR1@N` sends it, in the middle of an epoch.
# The program must write a snapshot at the next step boundary and exit 75 at once; run again, it
# resumes at that very step, and the final weights equal an uninterrupted run's bit for bit
# (CPU, --threads 1). Here one run is stopped twice (SIGTERM, then SIGUSR1) and resumed twice, the
# first and last parts with --deterministic: on the CPU it changes no result and breaks no resume.
source "$(dirname "$0")/lib.sh"
args=(40 1 --batch-size 1 --threads 1)  # 2048 steps per epoch, ~0.06 s: a signal lands mid-epoch

mkdir ref && (cd ref && run_logged out.log "$STEP0" "${args[@]}") || { cat ref/out.log; fail "uninterrupted run failed"; }
expected=$(final_checksum ref/out.log)
[ -n "$expected" ] || fail "no checksum in the uninterrupted run"

# stop_once PART SIGNAL AFTER_EPOCHS: starts (or resumes) the run, sends SIGNAL once the snapshot
# of AFTER_EPOCHS epochs exists, and checks the stop: exit 75 within 3 s, mid-epoch snapshot.
stop_once() {
  local part=$1 sig=$2 after=$3; shift 3
  "$STEP0" "${args[@]}" "$@" >"part$part.log" 2>&1 &
  local pid=$!; STARTED_PIDS+=("$pid")
  wait_for_line "part$part.log" "\($after epochs run, step 0\)" 60
  sleep 0.02  # a third into the epoch (a step takes ~30 us; 0.05 s sometimes reached its end)
  local start; start=$(now)
  kill -s "$sig" "$pid"
  wait_bounded "$pid" 30; local rc=$RC
  late "$start" 3 && fail "SIG$sig: took $(took_text) to stop"
  local took; took=$(took_text)
  [ "$rc" -eq 75 ] || { cat "part$part.log"; fail "SIG$sig: exit $rc, expected 75"; }
  local stop; stop=$(grep -E "Stopping at epoch [0-9]+, step [0-9]+ \(SIG$sig\)" "part$part.log") ||
    { cat "part$part.log"; fail "SIG$sig: no 'Stopping at ...' line"; }
  STOP_EPOCH=$(echo "$stop" | sed -E 's/.*epoch ([0-9]+), step ([0-9]+).*/\1/')
  STOP_STEP=$(echo "$stop" | sed -E 's/.*epoch ([0-9]+), step ([0-9]+).*/\2/')
  [ "$STOP_STEP" -gt 0 ] || fail "SIG$sig: stopped at an epoch boundary, not mid-epoch"
  grep -q "snapshot saved at snapshot-step0.pt ($STOP_EPOCH epochs run, step $STOP_STEP)" "part$part.log" ||
    fail "SIG$sig: no snapshot at the stop"
  echo "ok   SIG$sig: exit 75 $took after the signal, snapshot at epoch $STOP_EPOCH step $STOP_STEP"
}

mkdir stopped && cd stopped
stop_once 1 TERM 2 --deterministic
grep -qE '^deterministic +\| on \(CUBLAS_WORKSPACE_CONFIG=:4096:8\)' part1.log || { cat part1.log; fail "no 'deterministic | on' row"; }
first="at epoch $STOP_EPOCH, step $STOP_STEP"
stop_once 2 USR1 8
grep -q "Resuming training from snapshot snapshot-step0.pt $first" part2.log || { cat part2.log; fail "part 2 did not resume $first"; }
run_logged part3.log "$STEP0" "${args[@]}" --deterministic || { cat part3.log; fail "the resumed run failed"; }
grep -q "Resuming training from snapshot snapshot-step0.pt at epoch $STOP_EPOCH, step $STOP_STEP" part3.log ||
  { cat part3.log; fail "the rerun did not resume at epoch $STOP_EPOCH step $STOP_STEP"; }
got=$(final_checksum part3.log)
[ "$got" = "$expected" ] || fail "stopped twice and resumed: checksum $got, uninterrupted $expected"
pass "SIGTERM and SIGUSR1 mid-epoch: exit 75, snapshot at the step; resumed twice (with and without --deterministic), final weights equal ($got)"
