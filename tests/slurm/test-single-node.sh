#!/bin/bash
# defines: test-single-node.sh — the one-node scripts on a one-node Slurm cluster in this machine's
#          own namespaces (cluster-up.sh single): Puhti's torchrun --standalone step 2, Della's and
#          Delta's srun step 2, each trained to the end with exactly one snapshot; DDPW_PROGRAMS
#          chooses the programs.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step2_env_launch
require_torchrun
start_cluster single
node=$(sinfo -h -N -o %N)

for site in puhti della delta; do
  submit "$site" step2.sbatch 2 1
  expect_success; expect_nodes "$node"
  expect_lines 1 "Epoch 1 \| train loss"
  expect_lines 2 "Training snapshot saved"
  expect_one_snapshot
done
# DDPW_PROGRAMS points the scripts at other programs (a learner's own build of the steps).
mine=$TEST_DIR/my-programs
mkdir -p "$mine" && ln -sf "$DDPW_BIN/solutions/step2_env_launch" "$mine/step2_env_launch"
DDPW_PROGRAMS=$mine submit della step2.sbatch 2 1
expect_success
expect_lines 1 "^# programs $mine\$"
expect_lines 1 "Epoch 1 \| train loss"
DDPW_PROGRAMS=$TEST_DIR/no-such-folder submit della step2.sbatch 2 1
expect_failure "no-such-folder not found: build first, or set DDPW_PROGRAMS"
echo "PASS: one-node scripts ran on a single-node Slurm cluster"
