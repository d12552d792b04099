#!/usr/bin/env bash
# Every exercise compiles (the build made it) and runs as shipped, with the new concept missing:
# step 0 and the step 1 and step 3 exercises as one process, the step 2 exercise (still step 1's
# program) with the 2 workers it starts itself. Under torchrun, the step 2 exercise must refuse at
# once, saying why and what to do, instead of its workers fighting over one port and one rank.
source "$(dirname "$0")/lib.sh"
for step in step0_single_gpu step1_multigpu_fork step2_env_launch step3_multinode_slurm; do
  rm -f snapshot.pt
  MASTER_PORT=$(free_port) run_logged "$step.log" "$BIN/$step" 2 1 --device cpu \
    || { cat "$step.log"; fail "exercise $step does not run"; }
  [ -s snapshot.pt ] || fail "exercise $step wrote no snapshot"
  echo "exercise $step: runs ($(last_loss "$step.log") final loss)"
done

command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
rm -f snapshot.pt
start=$(date +%s)
rc=0
DDPW_TEST_TIMEOUT=90 run_logged torchrun.log torchrun --standalone --nproc_per_node=2 --no-python \
  "$BIN/step2_env_launch" 2 1 --device cpu || rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] || { cat torchrun.log; fail "the step 2 exercise under torchrun exited 0"; }
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then cat torchrun.log; fail "the step 2 exercise under torchrun hung (killed after 90 s)"; fi
[ "$took" -le 60 ] || { cat torchrun.log; fail "the step 2 exercise under torchrun took ${took}s to fail (bound 60 s)"; }
grep -qE 'error: step2_env_launch starts its own workers, but was started by torchrun .*\(fix: run it without the launcher, or complete TODO\(step2\)' torchrun.log \
  || { cat torchrun.log; fail "the step 2 exercise under torchrun did not say why it stopped"; }
! grep -qE 'already in use|DDPW_SPAWN' torchrun.log || { cat torchrun.log; fail "the step 2 exercise under torchrun started workers"; }
[ ! -e snapshot.pt ] || fail "the step 2 exercise under torchrun wrote a snapshot"
echo "exercise step2_env_launch under torchrun: refused in ${took}s: $(grep -m1 'starts its own workers' torchrun.log | cut -c1-160)"
pass "all exercises run; the step 2 exercise refuses torchrun"
