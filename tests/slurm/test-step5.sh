#!/bin/bash
# defines: test-step5.sh — step 5's batch scripts, unchanged (but for account/partition/gres and
#          modules), on a private Slurm cluster of two network-namespace nodes: the trainer reads srun's
#          variables and checks Lightning's --gpus/--nodes the scripts derive from the job.
#          clusters/puhti/step5.sbatch (2 nodes x 4 tasks): --strategy auto (ddp: one plain snapshot, by
#          global rank 0) and zero2 (a sharded snapshot: the manifest and one shard per rank); a --gpus
#          that is not the job's tasks per node fails, naming the #SBATCH line.
#          clusters/delta/step5.sbatch (2 nodes x 2 tasks): zero1 (4 shards), a --nodes that is not the
#          job's fails the same way, and its own placeholder account stops the job at once (the test
#          cluster has no accounting, so sbatch accepts what Delta's would refuse). All ranks of a job
#          end with equal weights.
#          Step 6's scripts on the same cluster (puhti, delta, roihu: the shape of their step5.sbatch): FSDP
#          on the tiny GPT, every rank trains, rank 0 prints the gathered weights' checksum, one save.
# Exit 77 (skipped) when not root or Slurm is not installed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step5_trainer solutions/step6_fully_sharded
start_cluster netns 2

submit puhti step5.sbatch --epochs 2
expect_success; expect_nodes "node[1-2]"
expect_lines 1 "^launcher +\| slurm *$"; expect_lines 1 "^world size +\| 8 *$"; expect_lines 1 "^strategy +\| ddp *$"
expect_lines 1 "Epoch 1 \| train loss"; expect_lines 2 "Training snapshot saved"
expect_equal_checksums 8
expect_one_snapshot solution
expect_lines 0 "claim rank|already in use"

submit puhti step5.sbatch --epochs 2 --strategy zero2
expect_success; expect_nodes "node[1-2]"
expect_lines 1 "^strategy +\| zero2 *$"; expect_lines 1 "^ZeRO stage +\| 2: "
expect_lines 1 "Epoch 1 \| train loss"; expect_lines 2 "Training snapshot saved"
expect_equal_checksums 8
expect_sharded_snapshot 8 2

# Lightning's devices must be what the job started: the user's --gpus 2 wins over the script's 4.
submit puhti step5.sbatch --epochs 1 --gpus 2
expect_failure "error: --gpus 2, but slurm started 8 ranks, 4 on this node \(fix: .*#SBATCH --ntasks-per-node=2"
expect_lines 0 "Epoch 0"

# Delta's script: 2 nodes x 2 tasks (its --gpus-per-node=2), ZeRO-1, every rank writes its shard.
submit delta step5.sbatch --epochs 2 --strategy zero1
expect_success; expect_nodes "node[1-2]"
expect_lines 1 "^launcher +\| slurm *$"; expect_lines 1 "^world size +\| 4 *$"; expect_lines 1 "^ranks per node +\| 2 *$"
expect_lines 1 "^strategy +\| zero1 *$"; expect_lines 1 "^ZeRO stage +\| 1: "
expect_lines 1 "Epoch 1 \| train loss"; expect_lines 2 "Training snapshot saved"
expect_equal_checksums 4
expect_lines 0 "claim rank|already in use"
expect_sharded_snapshot 4 2

# Lightning's num_nodes must be what the job started: the user's --nodes 3 wins over the script's 2.
submit delta step5.sbatch --epochs 1 --nodes 3
expect_failure "error: --nodes 3, but slurm started 4 ranks, 2 on this node \(2 node\(s\)\) \(fix: .*#SBATCH --nodes=3"
expect_lines 0 "Epoch 0"

# The script's own account line, a placeholder: the job stops before srun, saying what to give.
SITE_OPTIONS=--partition=debug submit delta step5.sbatch --epochs 1
expect_failure "--account is still the placeholder 'change_me-delta-gpu': submit with sbatch --account="
expect_lines 0 "^\+ srun"
# Step 6 (FSDP on the GPT), each site's script with the tiny GPT for one epoch: 8, 4 and 8 ranks.
for site_ranks in puhti:8 delta:4 roihu:8; do
  submit "${site_ranks%%:*}" step6.sbatch 1 1 --gpt-size tiny
  expect_success; expect_nodes "node[1-2]"; expect_lines 1 "^world size +\| ${site_ranks##*:} *$"
  expect_lines 1 "^model +\| gpt, --gpt-size tiny *$"; expect_lines 1 "Epoch 0 \| train loss"
  expect_lines 1 "final weights checksum .* \(gathered on rank 0\)"; expect_lines 1 "Training snapshot saved"
  expect_lines "${site_ranks##*:}" "kept between steps: .*FSDP over ${site_ranks##*:} ranks"
done
echo "PASS: clusters/puhti/step5.sbatch (ddp, zero2, a refused --gpus) and clusters/delta/step5.sbatch (zero1, a refused" \
     "--nodes, the placeholder account): the trainer under srun on 2 nodes; step6.sbatch of puhti, delta, roihu (FSDP)"
