#!/usr/bin/env bash
# A snapshot taken by a distributed run exports the weights rank 0 holds. Step 2 trains the CNN on
# a Fashion-MNIST subset with 2 ranks under torchrun; rank 0 writes the snapshot and, at the end,
# exports its live weights (--export-weights). build/bin/model_weights then exports the snapshot's
# weights; Python loads both files (torch.load, weights_only=True): every tensor must be equal,
# bit for bit, and the checksums the two ranks printed must be the snapshot's.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_bridge_lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found"
require_fashion_mnist
make_fashion_subset subset 2000 500

run_logged train.log torchrun --standalone --nproc_per_node=2 --no-python "$BIN/solutions/step2_env_launch" 1 1 \
  --dataset fashion-mnist --data-dir subset --batch-size 32 --threads 1 --device cpu --snapshot snapshot.pt \
  --export-weights rank0.pt || { tail -n 30 train.log; fail "training failed"; }
[ "$(grep -c 'Weights exported to rank0.pt' train.log)" -eq 1 ] || fail "expected exactly one export (rank 0's)"
run_logged convert.log "$BIN/model_weights" --dataset fashion-mnist --data-dir subset --threads 1 \
  --snapshot snapshot.pt --export-weights from_snapshot.pt || { cat convert.log; fail "model_weights failed"; }
grep -E 'weights from|checksum|exported' convert.log

"$PY" - rank0.pt from_snapshot.pt <<'PY' || fail "the snapshot's weights are not rank 0's"
import sys, torch
live, snap = (torch.load(f, weights_only=True) for f in sys.argv[1:3])
assert list(live) == list(snap), (list(live), list(snap))
values = 0
for name, tensor in live.items():
    assert tensor.dtype == snap[name].dtype and torch.equal(tensor, snap[name]), name
    values += tensor.numel()
print(f"equal: {len(live)} tensors, {values} values, bit for bit")
PY
ranks=$(checksum train.log | sort -u)
[ "$(checksum train.log | wc -l)" -eq 2 ] && [ "$(echo "$ranks" | wc -l)" -eq 1 ] || fail "ranks' checksums: $ranks"
[ "$ranks" = "$(checksum convert.log)" ] ||
  fail "ranks ended with checksum $ranks, the snapshot holds $(checksum convert.log)"
pass "2-rank snapshot exports rank 0's weights: equal bit for bit, checksum $ranks on both ranks and the snapshot"
