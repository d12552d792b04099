#!/usr/bin/env bash
# Step 2 under OpenMPI's mpirun, unchanged program.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
MASTER_PORT=$(free_port)
export MASTER_PORT
run_logged out.log mpirun "${root[@]}" --oversubscribe -np 2 "$BIN/solutions/step2_env_launch" 4 2 \
  || { cat out.log; fail "mpirun run exited non-zero"; }
check_training_log out.log 2 "[CPU0]"
pass "step 2 under mpirun"
