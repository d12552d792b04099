#!/usr/bin/env bash
# Step 2 under torchrun, unchanged program: torchrun --standalone --nproc_per_node=2 --no-python.
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
run_logged out.log torchrun --standalone --nproc_per_node=2 --no-python "$BIN/solutions/step2_env_launch" 4 2 \
  || { cat out.log; fail "torchrun run exited non-zero"; }
check_training_log out.log 2 "[CPU0]"
pass "step 2 under torchrun"
