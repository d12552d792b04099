#!/bin/bash
# defines: test-site.sh SITE — submits every batch script of clusters/SITE, unchanged, to a private
#          Slurm cluster of network-namespace nodes (node1..nodeN on one machine) and checks each
#          job: it completed with exit code 0 on the nodes it asked for, every rank reported, the
#          all-reduce sums agreed, training ran all epochs, and exactly one snapshot was written
#          (by global rank 0: one "saved" line per save, not one per node).
# Only the site's account/partition/gres (lib.sh: site_options) and its modules (site-env.sh)
# are replaced. Exit 77 (skipped) when not root or Slurm is not installed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
site=${1:?usage: test-site.sh delta|hipergator|della|puhti|roihu|supercloud}
site_options "$site" >/dev/null

require_slurm
require_programs hello allreduce_check solutions/step1_multigpu_fork solutions/step2_env_launch \
                 solutions/step3_multinode_slurm
[ "$site" != roihu ] || require_programs solutions/step4_sharded solutions/step5_trainer
case $site in
  delta|della|hipergator|puhti|roihu) require_torchrun ;;
  supercloud) command -v mpirun >/dev/null || fail "mpirun not found: apt-get install openmpi-bin" ;;
esac
nodes=2; [ "$site" = hipergator ] && nodes=4   # its 4 nodes x 1 GPU variant
start_cluster netns "$nodes"
make_mnist_subset "$TEST_DIR/data"
export DDPW_DATA_DIR=$TEST_DIR/data DDPW_DATASET=fashion-mnist

# A training job: all EPOCHS ran, one save every SAVE_EVERY epochs (and at the end), one file.
expect_training() {
  local epochs=$1 save_every=$2
  expect_success
  expect_lines 1 "Epoch $((epochs - 1)) \| train loss"
  expect_lines $(((epochs + save_every - 1) / save_every)) "Training snapshot saved"
  expect_one_snapshot solution
  expect_lines 0 "claim rank|already in use"
}

submit "$site" hello.sbatch
expect_success; expect_nodes "node[1-2]"; expect_lines 1 "OK: 4 of 4 ranks reported$"

submit "$site" allreduce.sbatch --max-bytes 1M --iters 3 --warmup 1
expect_success; expect_nodes "node[1-2]"; expect_lines 1 "Out of bounds values : 0 OK$"; expect_lines 1 "(^|:)OK$"

submit "$site" step1.sbatch 2 1
expect_training 2 1; expect_nodes node1

case $site in
  delta|della) submit "$site" step2.sbatch 2 1; expect_training 2 1; expect_nodes node1 ;;
  supercloud)  submit "$site" step2.sbatch 2 1; expect_training 2 1; expect_nodes "node[1-2]" ;;
  hipergator)  submit "$site" step2.sbatch 2 1; expect_training 2 1; expect_nodes "node[1-2]"
               submit "$site" step2-4nodes.sbatch 2 1; expect_training 2 1; expect_nodes "node[1-4]" ;;
  puhti|roihu) submit "$site" step2.sbatch 2 1; expect_training 2 1; expect_nodes node1
               submit "$site" step2-2nodes.sbatch 2 1; expect_training 2 1; expect_nodes "node[1-2]" ;;
esac

submit "$site" step3.sbatch 2 1
expect_training 2 1; expect_nodes "node[1-2]"

# Site-specific ways the READMEs show.
case $site in
  della)       # the seed's file:// rendezvous on the shared submit folder, a fresh file per job
    DDPW_RENDEZVOUS="file" submit della step3.sbatch 2 1
    expect_training 2 1; expect_nodes "node[1-2]"
    expect_lines 1 "^rendezvous +\| file://$RUN_DIR/rendezvous/$JOB_ID\.0 *$" ;;
  hipergator)  # the workshop's reservation: 1 node, 2 GPUs (typed geforce there, untyped here)
    for script in workshop-step1.sbatch workshop-step2.sbatch; do
      SITE_OPTIONS="--partition=debug --gres=gpu:2" submit hipergator "$script" 2 1
      expect_training 2 1; expect_nodes node1; expect_lines 1 "^world size +\| 2 *$"
    done ;;
  roihu)       # steps 4 and 5 (Puhti's are tested in test-step4.sh and test-step5.sh)
    submit roihu step4.sbatch 2 1
    expect_success; expect_nodes node1; expect_equal_checksums 2; expect_sharded_snapshot 2 2
    submit roihu step5.sbatch --epochs 2
    expect_success; expect_nodes "node[1-2]"; expect_equal_checksums 8 ;;
  supercloud)  # LLsub may not pass a script's arguments on: DDPW_ARGS does the same
    DDPW_ARGS="2 1" submit supercloud step3.sbatch
    expect_training 2 1; expect_lines 1 "^# arguments 2 1 \(DDPW_ARGS\)$"
    # A new account's limit, 1 node with 2 GPUs: the one-node variants, 2 ranks each.
    submit supercloud hello-1node.sbatch
    expect_success; expect_nodes node1; expect_lines 1 "OK: 2 of 2 ranks reported$"
    submit supercloud allreduce-1node.sbatch --max-bytes 1M --iters 3 --warmup 1
    expect_success; expect_nodes node1; expect_lines 1 "Out of bounds values : 0 OK$"; expect_lines 1 "(^|:)OK$"
    for script in step2-1node.sbatch step3-1node.sbatch; do
      submit supercloud "$script" 2 1; expect_training 2 1; expect_nodes node1; expect_lines 1 "world size +\| 2 *$"
    done
    submit supercloud mnist-1node.sbatch 1 1
    expect_training 1 1; expect_nodes node1 ;;
esac

submit "$site" mnist.sbatch 1 1
expect_training 1 1; expect_lines 1 "Epoch 0 \| train loss .*test accuracy"

# Mistakes a user makes fail at once, saying what to do.
case $site in
  delta)
    SITE_OPTIONS=--partition=debug submit delta hello.sbatch   # the script's own --account line
    expect_failure "--account is still the placeholder 'change_me-delta-gpu': submit with sbatch --account=" ;;
  della)
    DDPW_DATA_DIR=$TEST_DIR/no-data submit della mnist.sbatch 1 1
    expect_failure "no-data/train-images-idx3-ubyte\(.gz\) missing: compute nodes have no internet" ;;
esac
echo "PASS: clusters/$site: all batch scripts ran on the test cluster"
