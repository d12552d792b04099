#!/usr/bin/env bash
# CI's short accuracy check: one epoch of the CNN on the full Fashion-MNIST, 2 ranks under torchrun
# (global batch 64). Bound: >= 87 % test accuracy. Measured on the 2-core course machine
# (2026-11-23): 88.64 % after this epoch (2 ranks; a rerun gives the same), 88.88 % with 1 rank of
# batch 64, so 88.6-88.9 % (90.7 % after two epochs, 1 rank; the full table comes from
# scripts/accuracy). 87 % is beyond what any linear model reaches on Fashion-MNIST (~84 %), so
# passing means the CNN and its DDP training really learn, with room for what changes the result of
# a single epoch (the thread count, the LibTorch version).
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found"
require_fashion_mnist
DDPW_TEST_TIMEOUT=900 run_logged out.log torchrun --standalone --nproc_per_node=2 --no-python \
  "$BIN/solutions/step2_env_launch" 1 1 --dataset fashion-mnist --data-dir "$FASHION" --batch-size 32 --threads 1 --device cpu \
  --metrics metrics.csv || { tail -n 30 out.log; fail "training failed"; }
accuracy=$(awk -F, 'NR == 2 { print $7 }' metrics.csv)
[ -n "$accuracy" ] || fail "no metrics row"
grep -E '^Epoch 0' out.log
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.87) }' || fail "test accuracy $accuracy < 0.87 after one epoch"
pass "Fashion-MNIST, 2 ranks, 1 epoch: test accuracy $accuracy (>= 0.87)"
