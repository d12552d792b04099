#!/usr/bin/env bash
# Every exercise compiles (the build made it) and runs: as one process where the concept is missing.
source "$(dirname "$0")/lib.sh"
for step in step0_single_gpu step1_multigpu_fork step2_env_launch step3_multinode_slurm; do
  rm -f snapshot.pt
  port=()
  [ "$step" = step0_single_gpu ] || port=(--master-port 29713)
  MASTER_PORT=29713 run_logged "$step.log" "$BIN/$step" 2 1 --device cpu "${port[@]}" \
    || { cat "$step.log"; fail "exercise $step does not run"; }
  [ -s snapshot.pt ] || fail "exercise $step wrote no snapshot"
  echo "exercise $step: runs ($(last_loss "$step.log") final loss)"
done
pass "all exercises run"
