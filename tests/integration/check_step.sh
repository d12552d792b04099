#!/usr/bin/env bash
# scripts/check-step for real (CPU, Gloo, 2 ranks), and scripts/progress on what it recorded:
#  1. the exercises as shipped: step 0 DONE; steps 1-6 and 1b NOT DONE, exit 1, naming TODO(stepN)
#     (step 1 from what it did: one rank where the solution has two; steps 2-6 and 1b with the
#     program's own refusal or end-of-run check), never printing a line of the solution's code; one
#     progress line per check;
#  2. exercises that are done (the solutions' programs in a learner's build folder, --no-build):
#     DONE for steps 1, 2, 3 and 6 (the others' DONE: integration.page_runs, which runs check-step
#     on every step's solution), the second check of a step from the solution's kept result;
#  3. a copy handed out without solutions/: compared with the kept result, or with the one the
#     instructor's check left in the progress folder; with neither, exit 3 and no verdict.
source "$(dirname "$0")/lib.sh"
ROOT=${DDPW_ROOT:?DDPW_ROOT must point at the project}
export DDPW_BUILD
DDPW_BUILD=$(cd "$BIN/.." && pwd)   # the build these tests run in (check-step builds there too)
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
progress=$WORK/progress
mkdir -m 1777 "$progress"

# check NAME EXPECTED_RC COMMAND...: runs a check (bounded), keeps its output in NAME.log
check() {
  local name=$1 want=$2 rc=0; shift 2
  local start=$SECONDS
  DDPW_TEST_TIMEOUT=400 run_logged "$name.log" "$@" || rc=$?
  [ "$rc" = "$want" ] || { cat "$name.log"; fail "$name: exit code $rc, expected $want"; }
  echo "$name ($((SECONDS - start)) s): $(tail -n1 "$name.log")"
}
# The solution's answer lines never appear in check-step's output (a learner must not see them).
no_answer() {
  local step_dir=$1 log=$2 line
  while IFS= read -r line; do
    line=$(sed -E 's/^[-+] *//' <<<"$line")
    [ "${#line}" -ge 12 ] || continue
    ! grep -qF -- "$line" "$log" || fail "$log shows a line of the solution: $line"
  done < <(diff "$ROOT/$step_dir/main.cpp" "$ROOT/solutions/$step_dir/main.cpp" | grep '^>' | sed 's/^> //')
}

# ---- 1. the exercises as shipped, in the project's own build
export DDPW_PROGRESS_USER=learner-a
check step0 0 "$ROOT/scripts/check-step" 0 --progress "$progress"
grep -qE '^step 0: DONE \(it trains' step0.log || fail "step 0: no DONE line"
check step1 1 "$ROOT/scripts/check-step" 1 --progress "$progress"
grep -qE '^step 1: NOT DONE: the exercise ran as 1 rank, the solution as 2: TODO\(step1\) is still open' step1.log ||
  { cat step1.log; fail "step 1: the verdict does not say that one rank ran and TODO(step1) is open"; }
grep -qE "final checksum [0-9.]+, the solution's is [0-9.]+" step1.log || fail "step 1: the checksums are not compared"
no_answer step1_multigpu_fork step1.log
for n in 1b 2 3 4 5 6; do
  check "step$n" 1 "$ROOT/scripts/check-step" "$n" --progress "$progress"
  grep -qE "^step $n: NOT DONE: the program stopped, naming an open TODO: .*TODO\(step$n\)" "step$n.log" ||
    { cat "step$n.log"; fail "step $n: the verdict does not name TODO(step$n)"; }
  dir=$(cd "$ROOT" && ls -d step"$n"_*)
  no_answer "$dir" "step$n.log"
done
[ "$(wc -l < "$progress/learner-a.tsv")" = 8 ] || { cat "$progress/learner-a.tsv"; fail "expected 8 progress lines"; }

# ---- 2. exercises that are done: the solutions' programs as a learner's own, --no-build
mine=$WORK/learner-b-build
mkdir -p "$mine/bin/solutions"
done_steps=(1 2 3 6)   # 2 and 3: their kept results serve part 3; 6: FSDP's own DONE line
for n in "${done_steps[@]}"; do
  dir=$(cd "$ROOT" && ls -d step"$n"_*)
  cp "$BIN/solutions/$dir" "$mine/bin/$dir"
  cp "$BIN/solutions/$dir" "$mine/bin/solutions/$dir"
done
export DDPW_PROGRESS_USER=learner-b
for n in "${done_steps[@]}"; do
  DDPW_BUILD=$mine check "done$n" 0 "$ROOT/scripts/check-step" "$n" --no-build --progress "$progress"
  done_line="equal weights, checksum [0-9.e+-]+ = the solution's"
  [ "$n" != 6 ] || done_line="sharded; the gathered weights' checksum [0-9.e+-]+ = the solution's"  # FSDP: rank 0's
  grep -qE "^step $n: DONE \(2 ranks, $done_line\)" "done$n.log" || { cat "done$n.log"; fail "step $n: no DONE line"; }
done
DDPW_BUILD=$mine check again2 0 "$ROOT/scripts/check-step" 2 --no-build
grep -q "compared with the solution's result kept from an earlier check" again2.log ||
  { cat again2.log; fail "the second check of step 2 ran the solution again"; }
[ "$(grep -c 'running the solution' again2.log)" = 0 ] || fail "the second check ran the solution"

# ---- 3. a copy without solutions/ (the instructor kept them back)
handout=$WORK/handout
mkdir -p "$handout/scripts" "$handout/clusters/puhti"
cp "$ROOT/scripts/check-step" "$ROOT/scripts/progress" "$handout/scripts/"
cp "$ROOT/clusters/puhti/ds_config.json" "$handout/clusters/puhti/"
for dir in "$ROOT"/step*_*/; do mkdir -p "$handout/$(basename "$dir")"; cp "$dir/main.cpp" "$handout/$(basename "$dir")/"; done
DDPW_BUILD=$mine check kept3 0 "$handout/scripts/check-step" 3 --no-build
grep -q "solutions/step3_multinode_slurm is not here: comparing with the solution's result kept in" kept3.log ||
  { cat kept3.log; fail "without solutions/: not compared with the kept result"; }
fresh=$WORK/learner-c-build
mkdir -p "$fresh/bin"
cp "$BIN/solutions/step2_env_launch" "$fresh/bin/step2_env_launch"   # learner c's step 2 is done
export DDPW_PROGRESS_USER=learner-c
DDPW_BUILD=$fresh check nothing2 3 "$handout/scripts/check-step" 2 --no-build
grep -qE "^step 2: NOT COMPARED \(it ran on 2 ranks, checksum [0-9.]+; solutions/step2_env_launch is not here" nothing2.log ||
  { cat nothing2.log; fail "without solutions/ and no kept result: no NOT COMPARED line"; }
# learner b's checks with solutions/ left the solution's result in the progress folder
DDPW_BUILD=$fresh check shared2 0 "$handout/scripts/check-step" 2 --no-build --progress "$progress"
grep -q "comparing with the solution's result left in the progress folder" shared2.log ||
  { cat shared2.log; fail "without solutions/: not compared with the progress folder's result"; }

# ---- the instructor's table
"$ROOT/scripts/progress" "$progress" > table.txt
cat table.txt
row() { grep -E "^$1 " table.txt; }
[[ "$(row learner-a)" =~ \|\ DONE\ [0-9:]+\ +\|\ TODO\ [0-9:]+\ +\|\ TODO ]] || fail "learner-a's row: step 0 DONE, then TODO"
[ "$(row learner-b | grep -o 'DONE' | wc -l)" -ge 4 ] || fail "learner-b's row: steps 1, 2, 3 and 6 DONE"
row learner-c | grep -qE 'step 2 DONE' || fail "learner-c's row: step 2 DONE"
grep -q '^3 learners; done: step 0: 1, step 1: 1, step 1b: 0, step 2: 2, step 3: 1, step 4: 0, step 5: 0, step 6: 1$' table.txt ||
  fail "the table's count of who is done is wrong"
pass "check-step: shipped exercises NOT DONE naming their TODOs, done ones DONE (kept results reused), without solutions/ compared with a kept or shared result or NOT COMPARED; progress shows the table"
