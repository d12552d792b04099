#!/usr/bin/env bash
# Fault tolerance: torchrun --max-restarts brings the group back after a worker is killed, the
# workers resume from the snapshot, and the run ends with the same weights as an uninterrupted one.
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found"
args=(30 2 --batch-size 8 --threads 1 --rendezvous-timeout 60 --collective-timeout 60)

mkdir ref && (cd ref && run_logged out.log torchrun --standalone --nproc_per_node=2 --no-python \
  "$BIN/solutions/step2_env_launch" "${args[@]}") || { cat ref/out.log; fail "uninterrupted run failed"; }
expected=$(grep -m1 'final weights checksum' ref/out.log | awk '{print $NF}')

mkdir killed && cd killed
timeout --kill-after=10 240 torchrun --standalone --nproc_per_node=2 --max-restarts=1 --no-python \
  "$BIN/solutions/step2_env_launch" "${args[@]}" >out.log 2>&1 &
agent=$!
# Wait for the first snapshot, then kill one worker (a child of our torchrun) mid-epoch.
for _ in $(seq 400); do [ -s snapshot-step2-solution.pt ] && break; sleep 0.05; done
[ -s snapshot-step2-solution.pt ] || { kill "$agent"; cat out.log; fail "no snapshot appeared"; }
sleep 0.3
victim=""
for p in $(pgrep -P "$agent"; for c in $(pgrep -P "$agent"); do pgrep -P "$c"; done); do
  [ "$(cat /proc/"$p"/comm 2>/dev/null)" = step2_env_launc ] && victim=$p && break
done
[ -n "$victim" ] || { kill "$agent"; cat out.log; fail "no worker process found to kill"; }
kill -9 "$victim"
rc=0; wait "$agent" || rc=$?
[ "$rc" -eq 0 ] || { cat out.log; fail "torchrun did not recover (exit $rc)"; }
grep -q 'Resuming training from snapshot' out.log || { cat out.log; fail "the restarted workers did not resume"; }
got=$(grep 'final weights checksum' out.log | tail -n1 | awk '{print $NF}')
[ "$got" = "$expected" ] || fail "resumed run ends with checksum $got, uninterrupted $expected"
grep -m1 'Resuming training from snapshot' out.log
pass "killed worker $victim; restarted and resumed; final weights equal the uninterrupted run ($got)"
