#!/usr/bin/env bash
# Fault: a stop signal reaches ONE worker of two (step 2 under torchrun): SIGUSR1 to rank 1 (not
# the snapshot writer), later SIGTERM to rank 0. The stop agreement (one allreduce every ~0.25 s of
# steps, which also fixes the next check step) makes both ranks stop at the same step; rank 0
# writes the snapshot; both exit 75 (torchrun
# itself exits 1 whatever its workers return: it reports each worker's code). The third launch
# resumes and ends with the same weights as an uninterrupted run, bit for bit.
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found"
launch=(torchrun --standalone --nproc_per_node=2 --no-python "$STEP2")
args=(14 1 --batch-size 8 --threads 1 --rendezvous-timeout 30 --collective-timeout 10)  # 128 steps per epoch

mkdir ref && (cd ref && run_logged out.log "${launch[@]}" "${args[@]}") || { cat ref/out.log; fail "uninterrupted run failed"; }
expected=$(final_checksum ref/out.log)
[ -n "$expected" ] || fail "no checksum in the uninterrupted run"

# stop_one PART SIGNAL RANK AFTER_EPOCHS: launches, sends SIGNAL to worker RANK only once the
# snapshot of AFTER_EPOCHS epochs exists, checks that both ranks stop at one step and exit 75.
stop_one() {
  local log=part$1.log sig=$2 rank=$3 after=$4
  "${launch[@]}" "${args[@]}" >"$log" 2>&1 &
  local agent=$!; STARTED_PIDS+=("$agent")
  wait_for_line "$log" "\($after epochs run, step 0\)" 60
  sleep 0.1  # into the epoch (~3 ms a step)
  local victim; victim=$(torchrun_worker "$agent" "$rank")
  [ -n "$victim" ] || fail "no worker with RANK=$rank"
  local start; start=$(now)
  kill -s "$sig" "$victim"
  wait_bounded "$agent" 60; local rc=$RC
  late "$start" 10 && { cat "$log"; fail "SIG$sig to rank $rank: torchrun took $(took_text) to end"; }
  local took; took=$(took_text)
  local stops; stops=$(grep -oE '^\[CPU[01]\] Stopping at epoch [0-9]+, step [0-9]+' "$log" | sed 's/^\[CPU[01]\] //' | sort | uniq -c)
  [ "$(echo "$stops" | wc -l)" -eq 1 ] && [ "$(echo "$stops" | awk '{print $1}')" -eq 2 ] ||
    { cat "$log"; fail "SIG$sig to rank $rank: the ranks did not stop at one step: $stops"; }
  [ "$(grep -cE 'exitcode *: 75 ' "$log")" -eq 2 ] || { cat "$log"; fail "SIG$sig to rank $rank: not both workers exited 75"; }
  STOP=$(echo "$stops" | sed -E 's/^ *2 Stopping //')  # "at epoch E, step S"
  local step=${STOP##*step }
  [ "$step" -gt 0 ] || fail "SIG$sig: stopped at an epoch boundary, not mid-epoch"
  local epoch=${STOP#at epoch }; epoch=${epoch%%,*}
  grep -q "snapshot saved at snapshot-step2-solution.pt ($epoch epochs run, step $step)" "$log" || fail "SIG$sig: no snapshot at the stop"
  echo "ok   SIG$sig to rank $rank only: both ranks stopped $STOP, both exit 75, torchrun ended $took after the signal (exit $rc)"
}

mkdir stopped && cd stopped
stop_one 1 USR1 1 2
first=$STOP
stop_one 2 TERM 0 6
grep -q "Resuming training from snapshot snapshot-step2-solution.pt $first" part2.log || { cat part2.log; fail "part 2 did not resume $first"; }
run_logged part3.log "${launch[@]}" "${args[@]}" || { cat part3.log; fail "the resumed run failed"; }
grep -q "Resuming training from snapshot snapshot-step2-solution.pt $STOP" part3.log || { cat part3.log; fail "part 3 did not resume $STOP"; }
[ "$(grep -c 'final weights checksum' part3.log)" -eq 2 ] || fail "expected two checksum lines"
got=$(final_checksum part3.log)
[ "$(grep 'final weights checksum' part3.log | awk '{print $NF}' | sort -u)" = "$got" ] || fail "the ranks ended with different weights"
[ "$got" = "$expected" ] || fail "stopped twice and resumed: checksum $got, uninterrupted $expected"
pass "one rank signalled: all stop at one step, exit 75; resumed twice, final weights equal ($got)"
