#!/usr/bin/env bash
# Fault: a stop signal in step 1, whose parent started the workers itself (spawn). SIGUSR1 to the
# parent (as sbatch --signal=B:USR1 would) is passed on to every worker; SIGTERM to one worker
# reaches the other through the stop agreement. Each time the parent exits 75 after rank 0 wrote
# a mid-epoch snapshot, and the resumed run ends with the uninterrupted run's weights, bit for bit.
source "$(dirname "$0")/lib.sh"
port=$(free_port)
# Batches of 4: ~256 steps an epoch, ~0.8 s, so that a stop, acted on at the next check (about every
# 0.25 s: stop_agreement.h), lands inside the epoch it was sent in (with 8 it could reach the next
# epoch's start when the machine was fast: "stopped at an epoch boundary").
args=(14 1 --batch-size 4 --threads 1 --master-port "$port" --rendezvous-timeout 30 --collective-timeout 10)

mkdir ref && (cd ref && run_logged out.log "$STEP1" "${args[@]}") || { cat ref/out.log; fail "uninterrupted run failed"; }
expected=$(final_checksum ref/out.log)
[ -n "$expected" ] || fail "no checksum in the uninterrupted run"

# stop_one PART SIGNAL TARGET AFTER_EPOCHS: TARGET is "parent" or a rank.
stop_one() {
  local log=part$1.log sig=$2 target=$3 after=$4
  "$STEP1" "${args[@]}" >"$log" 2>&1 &
  local parent=$!; STARTED_PIDS+=("$parent")
  wait_for_line "$log" "\($after epochs run, step 0\)" 60
  sleep 0.1  # into the epoch (~3 ms a step)
  local victim=$parent
  [ "$target" = parent ] || victim=$(spawn_worker "$parent" "$target")
  [ -n "$victim" ] || fail "no worker of rank $target"
  local start; start=$(now)
  kill -s "$sig" "$victim"
  wait_bounded "$parent" 60; local rc=$RC
  late "$start" 5 && fail "SIG$sig to $target: took $(took_text)"
  local took; took=$(took_text)
  [ "$rc" -eq 75 ] || { cat "$log"; fail "SIG$sig to $target: the parent exited $rc, expected 75"; }
  local stops; stops=$(grep -oE '^\[CPU[01]\] Stopping at epoch [0-9]+, step [0-9]+' "$log" | sed 's/^\[CPU[01]\] //' | sort | uniq -c)
  [ "$(echo "$stops" | wc -l)" -eq 1 ] && [ "$(echo "$stops" | awk '{print $1}')" -eq 2 ] ||
    { cat "$log"; fail "SIG$sig to $target: the ranks did not stop at one step: $stops"; }
  STOP=$(echo "$stops" | sed -E 's/^ *2 Stopping //')
  local step=${STOP##*step }
  [ "$step" -gt 0 ] || fail "SIG$sig: stopped at an epoch boundary, not mid-epoch"
  echo "ok   SIG$sig to $target: both ranks stopped $STOP, parent exit 75 $took after the signal"
}

mkdir stopped && cd stopped
stop_one 1 USR1 parent 2
first=$STOP
stop_one 2 TERM 1 6
grep -q "Resuming training from snapshot snapshot-step1-solution.pt $first" part2.log || { cat part2.log; fail "part 2 did not resume $first"; }
run_logged part3.log "$STEP1" "${args[@]}" || { cat part3.log; fail "the resumed run failed"; }
grep -q "Resuming training from snapshot snapshot-step1-solution.pt $STOP" part3.log || { cat part3.log; fail "part 3 did not resume $STOP"; }
got=$(final_checksum part3.log)
[ "$got" = "$expected" ] || fail "stopped twice and resumed: checksum $got, uninterrupted $expected"
pass "spawn: SIGUSR1 to the parent and SIGTERM to one worker stop both at one step, exit 75; resumed run equal ($got)"
