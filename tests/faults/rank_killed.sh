#!/usr/bin/env bash
# Fault: a rank dies (SIGKILL) or hangs (SIGSTOP) in the middle of an epoch. Every other rank must
# exit non-zero by itself within the collective timeout (10 s; 5 s for the hang) plus a few
# seconds, saying which collective failed and where the ranks were (the stopped rank's last
# collective, kept in the store). Under torchrun the agent then ends; in step 1 the
# parent ends the others and names the rank that died.
source "$(dirname "$0")/lib.sh"
args=(100 1 --batch-size 8 --threads 1 --rendezvous-timeout 30 --collective-timeout 10)

# By hand, three ranks: kill rank 1; ranks 0 and 2 must fail on their own.
mkdir three && cd three
launch_ranks 3 "$(free_port)" "$STEP2" "${args[@]}"
wait_for_line rank0.log '\(1 epochs run, step 0\)' 60; sleep 0.1
start=$(now); kill -9 "${RANK_PIDS[1]}"
for r in 0 2; do
  wait_bounded "${RANK_PIDS[$r]}" 30; rc=$RC
  late "$start" 13 && fail "three ranks: rank $r took $(took_text) to stop"; took=$(took_text)
  [ "$rc" -ne 0 ] || fail "three ranks: rank $r exited 0 after rank 1 was killed"
  grep -qE "failed on rank $r of 3 .*another rank probably died" "rank$r.log" || { cat "rank$r.log"; fail "rank $r: no message"; }
  # Where the others were, from the store (collective_trace.h): rank 1's record outlives it.
  grep -qE "Where the ranks are: this rank \($r\) is in #[0-9]+ '" "rank$r.log" || { cat "rank$r.log"; fail "rank $r: no word on where the ranks are"; }
  echo "ok   3 ranks, rank 1 killed: rank $r exit $rc after $took: $(grep -m1 error: "rank$r.log" | cut -c1-120)"
done
cd "$WORK"

# By hand, two ranks: kill rank 0 (it serves the store and writes the snapshot).
mkdir kill0 && cd kill0
launch_ranks 2 "$(free_port)" "$STEP2" "${args[@]}"
wait_for_line rank0.log '\(1 epochs run, step 0\)' 60; sleep 0.1
start=$(now); kill -9 "${RANK_PIDS[0]}"
wait_bounded "${RANK_PIDS[1]}" 30; rc=$RC
late "$start" 13 && fail "rank 0 killed: rank 1 took $(took_text)"; took=$(took_text)
[ "$rc" -ne 0 ] || fail "rank 0 killed: rank 1 exited 0"
grep -q 'error: .*failed on rank 1 of 2' rank1.log || { cat rank1.log; fail "rank 1: no message"; }
echo "ok   2 ranks, rank 0 killed: rank 1 exit $rc after $took"
cd "$WORK"

# By hand, two ranks: rank 1 hangs (SIGSTOP); rank 0 must give up after its collective timeout.
mkdir hang && cd hang
launch_ranks 2 "$(free_port)" "$STEP2" 100 1 --batch-size 8 --threads 1 --collective-timeout 5
wait_for_line rank0.log '\(1 epochs run, step 0\)' 60; sleep 0.1
start=$(now); kill -STOP "${RANK_PIDS[1]}"
wait_bounded "${RANK_PIDS[0]}" 30; rc=$RC
late "$start" 8 && fail "hung rank: rank 0 took $(took_text), the collective timeout is 5 s"; took=$(took_text)
kill -9 "${RANK_PIDS[1]}"
[ "$rc" -ne 0 ] || fail "hung rank: rank 0 exited 0"
grep -q 'failed on rank 0 of 2 after waiting 5.* (timeout 5.0 s)' rank0.log || { cat rank0.log; fail "rank 0: no timeout message"; }
grep -qE "Where the ranks are: this rank \(0\) is in #[0-9]+ '.*'; (rank 1 @ [^ ]+ never arrived at|every other rank entered it too)" rank0.log \
  || { cat rank0.log; fail "rank 0: the timeout does not say where rank 1 is"; }
echo "ok   2 ranks, rank 1 stopped: rank 0 exit $rc after $took (timeout 5 s)"
cd "$WORK"

# torchrun: kill rank 1; rank 0 exits 1 by itself (not killed by the agent), torchrun ends.
if command -v torchrun >/dev/null; then
  mkdir torchrun && cd torchrun
  torchrun --standalone --nproc_per_node=2 --no-python "$STEP2" "${args[@]}" >out.log 2>&1 &
  agent=$!; STARTED_PIDS+=("$agent")
  wait_for_line out.log '\(1 epochs run, step 0\)' 60; sleep 0.1
  victim=$(torchrun_worker "$agent" 1); [ -n "$victim" ] || fail "torchrun: no rank 1 worker"
  start=$(now); kill -9 "$victim"
  wait_bounded "$agent" 60; rc=$RC
  late "$start" 13 && fail "torchrun took $(took_text) to end"; took=$(took_text)
  [ "$rc" -ne 0 ] || fail "torchrun exited 0 after a worker was killed"
  grep -q 'error: .*failed on rank 0 of 2' out.log || { cat out.log; fail "torchrun: rank 0 did not report the failed collective"; }
  grep -A3 'rank *: 0 ' out.log | grep -qE 'exitcode *: 1 ' || { cat out.log; fail "torchrun: rank 0 did not exit 1 by itself"; }
  echo "ok   torchrun, rank 1 killed: rank 0 exit 1 by itself, torchrun exit $rc after $took"
  cd "$WORK"
else
  fail "torchrun not found"
fi

# Step 1 (spawn): kill either worker; the parent ends the other and names the dead rank.
for victim_rank in 1 0; do
  mkdir "spawn$victim_rank" && cd "spawn$victim_rank"
  "$STEP1" "${args[@]}" --master-port "$(free_port)" >out.log 2>&1 &
  parent=$!; STARTED_PIDS+=("$parent")
  wait_for_line out.log '\(1 epochs run, step 0\)' 60; sleep 0.1
  victim=$(spawn_worker "$parent" "$victim_rank"); [ -n "$victim" ] || fail "spawn: no worker of rank $victim_rank"
  start=$(now); kill -9 "$victim"
  wait_bounded "$parent" 60; rc=$RC
  late "$start" 13 && fail "spawn: the parent took $(took_text)"; took=$(took_text)
  [ "$rc" -eq 1 ] || { cat out.log; fail "spawn: the parent exited $rc, expected 1"; }
  grep -q "spawn: worker rank $victim_rank (pid $victim) was killed by signal 9" out.log || { cat out.log; fail "spawn: rank $victim_rank not named"; }
  [ -z "$(pgrep -P "$parent")" ] || fail "spawn: workers left behind"
  echo "ok   spawn, rank $victim_rank killed: parent exit 1 after $took: $(grep -m1 '^spawn:' out.log)"
  cd "$WORK"
done
pass "a killed or hung rank never hangs the others"
