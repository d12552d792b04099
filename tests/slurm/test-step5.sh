#!/bin/bash
# defines: test-step5.sh — clusters/puhti/step5.sbatch, unchanged (but for account/partition/gres and
#          modules), on a private Slurm cluster of two network-namespace nodes: the trainer reads srun's
#          variables (2 nodes x 4 tasks), checks Lightning's --gpus/--nodes the script derives from the
#          job, and trains with --strategy auto (ddp: one plain snapshot, by global rank 0) and zero2
#          (a sharded snapshot: the manifest and one shard per rank); all 8 ranks end with equal
#          weights. A --gpus that is not the job's tasks per node fails, naming the #SBATCH line.
# Exit 77 (skipped) when not root or Slurm is not installed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step5_trainer
start_cluster netns 2

# The 8 ranks' final weights: one checksum line each, all equal.
expect_equal_checksums() {
  expect_lines 8 "final weights checksum"
  local sums
  sums=$(grep -E 'final weights checksum' "$JOB_LOG" | awk '{print $NF}' | sort -u)
  [ "$(echo "$sums" | wc -l)" = 1 ] || { show_log; fail "job $JOB_ID: the ranks ended with different weights: $sums"; }
  note "8 ranks, weights checksum $sums"
}

submit puhti step5.sbatch --epochs 2
expect_success; expect_nodes "node[1-2]"
expect_lines 1 "^launcher +\| slurm *$"; expect_lines 1 "^world size +\| 8 *$"; expect_lines 1 "^strategy +\| ddp *$"
expect_lines 1 "Epoch 1 \| train loss"; expect_lines 2 "Training snapshot saved"
expect_equal_checksums
expect_one_snapshot solution
expect_lines 0 "claim rank|already in use"

submit puhti step5.sbatch --epochs 2 --strategy zero2
expect_success; expect_nodes "node[1-2]"
expect_lines 1 "^strategy +\| zero2 *$"; expect_lines 1 "^ZeRO stage +\| 2: "
expect_lines 1 "Epoch 1 \| train loss"; expect_lines 2 "Training snapshot saved"
expect_equal_checksums
manifest="$RUN_DIR/snapshots/ddpw-puhti-step5.solution.pt"
[ -f "$manifest" ] || { show_log; fail "job $JOB_ID: no manifest $manifest"; }
shards=$(find "$RUN_DIR/snapshots" -name 'ddpw-puhti-step5.solution.pt.g*.rank*-of-8' | wc -l)
[ "$shards" = 8 ] || { ls -la "$RUN_DIR/snapshots"; fail "job $JOB_ID: $shards shards, expected 8 (one per rank)"; }

# Lightning's devices must be what the job started: the user's --gpus 2 wins over the script's 4.
submit puhti step5.sbatch --epochs 1 --gpus 2
expect_failure "error: --gpus 2, but slurm started 8 ranks, 4 on this node \(fix: .*#SBATCH --ntasks-per-node=2"
expect_lines 0 "Epoch 0"
echo "PASS: clusters/puhti/step5.sbatch: the trainer under srun on 2 nodes (ddp, zero2) and a refused --gpus"
