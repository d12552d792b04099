#!/usr/bin/env bash
# Step 1 under its own launcher: the program forks (re-executes) two workers on the CPU.
source "$(dirname "$0")/lib.sh"
run_logged out.log "$BIN/solutions/step1_multigpu_fork" 4 2 --nproc 2 --device cpu \
  || { cat out.log; fail "step1 exited non-zero"; }
check_training_log out.log 2 "[CPU0]"
pass "step 1: 2 forked workers"
