#!/bin/bash
# defines: test-single-node.sh — the one-node scripts on a one-node Slurm cluster in this machine's
#          own namespaces (cluster-up.sh single): Puhti's torchrun --standalone step 2, Della's and
#          Delta's srun step 2, each trained to the end with exactly one snapshot.
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
echo "PASS: one-node scripts ran on a single-node Slurm cluster"
