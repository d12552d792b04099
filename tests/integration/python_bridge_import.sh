#!/usr/bin/env bash
# Python -> C++. Python trains the twin CNN for 20 steps and saves it the usual way,
# torch.save(model.state_dict(), path) (an OrderedDict, python/pretrain.py). C++ loads it with
# --init-weights and runs zero training steps (build/bin/model_weights): the first training batch's
# loss and the weights checksum must be Python's for the same file (and the test figures too).
# Then step 0 trains from a state_dict Python saved for the synthetic workload, the exact map the
# data follow: its first epoch's loss is the noise floor (1e-4), not the seeded start's.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_bridge_lib.sh"
require_fashion_mnist
# The first 2000 training and test images: the figures compared are the first batch's loss, the
# weights' checksum and the test figures on the same images, as on the whole set.
make_fashion_subset subset 2000 2000
FASHION=subset

run_logged pretrain.log "$PY" "$DDPW_ROOT/python/pretrain.py" pretrained.pt --dataset fashion-mnist --data-dir "$FASHION" \
  --steps 20 --threads 2 || { cat pretrain.log; fail "python/pretrain.py failed"; }
"$PY" -c 'import collections, sys, torch
sd = torch.load(sys.argv[1], weights_only=True)
assert type(sd) is collections.OrderedDict and hasattr(sd, "_metadata"), type(sd)' pretrained.pt ||
  fail "pretrain.py did not save a state_dict() OrderedDict"
run_logged py.log "$PY" "$DDPW_ROOT/python/evaluate.py" pretrained.pt --dataset fashion-mnist --data-dir "$FASHION" \
  --threads 2 ||
  { cat py.log; fail "python/evaluate.py failed"; }
run_logged cpp.log "$BIN/model_weights" --dataset fashion-mnist --data-dir "$FASHION" --init-weights pretrained.pt \
  --threads 2 ||
  { cat cpp.log; fail "model_weights --init-weights failed"; }
grep -E '^(first batch|test loss|.*checksum)' py.log cpp.log

[ -n "$(first_batch_loss cpp.log)" ] && [ -n "$(checksum cpp.log)" ] || fail "no figures from model_weights"
d_first=$(within "$(first_batch_loss py.log)" "$(first_batch_loss cpp.log)" 1e-6) ||
  fail "first batch loss: Python $(first_batch_loss py.log), C++ $(first_batch_loss cpp.log)"
d_sum=$(within "$(checksum py.log)" "$(checksum cpp.log)" 1e-6) ||
  fail "weights checksum: Python $(checksum py.log), C++ $(checksum cpp.log)"
[ "$(test_count py.log)" = "$(test_count cpp.log)" ] || fail "test accuracy differs"
d_loss=$(within "$(test_loss py.log)" "$(test_loss cpp.log)" 1e-6) || fail "test loss differs by $d_loss"

# Step 0 from a Python state_dict: w = linspace(-1, 1, 20), b = 0.5, the map of ddp/data.cpp.
"$PY" -c 'import sys, torch
from ddpw import LinearRegressor
m = LinearRegressor()
with torch.no_grad():
    m.fc.weight.copy_(torch.linspace(-1.0, 1.0, 20).reshape(1, 20)); m.fc.bias.fill_(0.5)
torch.save(m.state_dict(), sys.argv[1])' exact_map.pt
run_logged seeded_run.log "$BIN/step0_single_gpu" 1 1 --device cpu --snapshot seeded.snap ||
  { cat seeded_run.log; fail "step 0 failed"; }
run_logged init_run.log "$BIN/step0_single_gpu" 1 1 --device cpu --snapshot init.snap \
  --init-weights exact_map.pt ||
  { cat init_run.log; fail "step 0 --init-weights failed"; }
grep -qE '^initial weights +\| exact_map\.pt' init_run.log || fail "the settings table does not show the initial weights"
seeded=$(first_loss seeded_run.log); from_python=$(first_loss init_run.log)
awk -v s="$seeded" -v p="$from_python" 'BEGIN { exit !(p < 2e-4 && s > 10 * p) }' ||
  fail "epoch 0 train loss $from_python from Python's exact map, $seeded from the seeded model"

pass "C++ --init-weights of Python's state_dict: first batch loss |diff| $d_first, checksum |diff| $d_sum," \
     "test loss |diff| $d_loss, accuracy $(test_count cpp.log) on both sides; step 0 from Python's exact map:" \
     "epoch 0 train loss $from_python (seeded start: $seeded)"
