#!/usr/bin/env bash
# Fault: ranks call different collectives (rank 0 alone broadcasts, as a save left inside a
# rank-0 guard; the other rank goes on to the next allreduce), 2 ranks under torchrun.
#   - With the collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL, as PyTorch): both ranks stop at
#     once, each naming both ranks' calls (op, dtype, shape) and the fix, well before the collective
#     timeout (5 s).
#   - Without it: the mismatched pair cannot complete (a broadcast against an allreduce of another
#     size) and the ranks stop by the collective timeout, naming where each rank was. Either way
#     nothing hangs and the exit code is non-zero.
source "$(dirname "$0")/lib.sh"
program=$BIN/rank_guard_mismatch
[ -x "$program" ] || fail "tests/rank_guard_mismatch is not built (cmake --build build --target rank_guard_mismatch)"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"

run() {  # run LOG [VAR=VALUE...]: the program's 2 ranks under torchrun; sets RC
  local log=$1; shift
  RC=0
  env "$@" timeout --kill-after=10 60 torchrun --standalone --nproc_per_node=2 --no-python "$program" >"$log" 2>&1 || RC=$?
}
stuck() {  # stuck LOG: the longest time a rank says it was stuck after the mismatch (seconds)
  awk 'BEGIN { m = 0 } /stopped [0-9.]+ s after the mismatch/ { for (i = 1; i < NF; i++) if ($i == "stopped") t = $(i + 1) + 0;
       if (t > m) m = t; n++ } END { if (n < 2) exit 1; printf "%.2f\n", m }' "$1"
}

run checked.log TORCH_DISTRIBUTED_DEBUG=DETAIL
[ "$RC" -ne 0 ] || { cat checked.log; fail "with the check: exit 0"; }
[ "$RC" -ne 124 ] && [ "$RC" -ne 137 ] || { cat checked.log; fail "with the check: still running after 60 s"; }
for r in 0 1; do
  grep -E "error: .*collective [0-9]+ differs across ranks: rank 0 @ [^:]+: broadcast from rank 0 of float32 \[10\]; rank 1 @ [^:]+: allreduce \(sum\) of float32 \[1234\]" checked.log |
    grep -q "rank $r" || { cat checked.log; fail "with the check: rank $r's line does not name both calls"; }
done
grep -q "fix: every rank must call the same collectives in the same order" checked.log ||
  { cat checked.log; fail "with the check: no fix in the message"; }
! grep -q "finished" checked.log || { cat checked.log; fail "with the check: a rank went on as if nothing happened"; }
took=$(stuck checked.log) || { cat checked.log; fail "with the check: not both ranks say when they stopped"; }
[ -n "$took" ] && ! over "$took" 2.5 || { cat checked.log; fail "with the check: a rank was stuck ${took}s (the collective timeout is 5 s)"; }
echo "ok   with the check: exit $RC, both ranks stopped within ${took}s: $(grep -m1 'differs across ranks' checked.log | cut -c1-150)"

run plain.log
[ "$RC" -ne 0 ] || { cat plain.log; fail "without the check: exit 0"; }
[ "$RC" -ne 124 ] && [ "$RC" -ne 137 ] || { cat plain.log; fail "without the check: still running after 60 s"; }
grep -q "Where the ranks are" plain.log || { cat plain.log; fail "without the check: no word on where the ranks are"; }
took=$(stuck plain.log) || { cat plain.log; fail "without the check: not both ranks say when they stopped"; }
over "$took" 4.5 || { cat plain.log; fail "without the check: stopped after ${took}s, before the collective timeout (5 s)?"; }
echo "ok   without the check: exit $RC, the ranks stopped within ${took}s (the collective timeout, 5 s): $(grep -m1 'error:' plain.log | cut -c1-150)"

echo "PASS: a collective inside a rank-0 guard stops both ranks; the check names both calls at once"
