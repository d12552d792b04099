#!/bin/bash
# defines: test-step4.sh — step 4's batch scripts (clusters/puhti/step4.sbatch: one node, torchrun;
#          clusters/delta/step4.sbatch: two nodes, srun), unchanged, on a private Slurm cluster of
#          network-namespace nodes, with Puhti's ds_config.json: each job completes on the nodes it
#          asked for, every rank ends with the same weights, the config's batch of 400 is split over
#          the ranks, and the snapshot is a manifest with one shard per rank, written by every rank
#          (one "saved" line per save). A second submission in the same folder resumes from it.
# Exit 77 (skipped) when not root or Slurm is not installed, as the site tests.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
site_options puhti >/dev/null
require_slurm
require_programs solutions/step4_sharded
require_torchrun
start_cluster netns 2

# expect_sharded_training EPOCHS RANKS: all epochs ran on RANKS ranks with equal final weights, and
# snapshots/ holds the job's manifest and exactly RANKS shards of its last save.
expect_sharded_training() {
  local epochs=$1 ranks=$2
  expect_success
  expect_lines 1 "Epoch $((epochs - 1)) \| train loss"
  expect_lines "$epochs" "Training snapshot saved"
  expect_equal_checksums "$ranks"
  expect_lines 1 "^batch size per rank +\| $((400 / ranks)) "
  expect_lines 1 "^DeepSpeed config +\| $DDPW_ROOT/clusters/puhti/ds_config.json"
  expect_lines 1 "^world size +\| $ranks *$"
  expect_sharded_snapshot "$ranks" "$epochs"  # saved every epoch: generation = epochs
}

submit puhti step4.sbatch 2 1
expect_sharded_training 2 2; expect_nodes node1
expect_lines 1 "^ZeRO stage +\| 2: optimizer state and gradients sharded over 2 rank"

submit delta step4.sbatch 2 1 --zero 1
expect_sharded_training 2 4; expect_nodes "node[1-2]"
expect_lines 1 "^ZeRO stage +\| 1: optimizer state sharded over 4 rank"
# The same job again in its folder: it finds the finished snapshot, resumes at epoch 2 of 2.
SUBMIT_DIR=$RUN_DIR submit delta step4.sbatch 2 1 --zero 1
expect_success
expect_lines 4 "Resuming training from snapshot .*ddpw-delta-step4.solution.pt at epoch 2, step 0"
echo "PASS: clusters/puhti/step4.sbatch and clusters/delta/step4.sbatch ran on the test cluster"
