#!/usr/bin/env bash
# C++ -> Python. Step 0 trains the CNN for one epoch on Fashion-MNIST and writes its weights with
# --export-weights. Python loads the file into the twin module with torch.load(weights_only=True)
# and evaluates it on the test images (python/evaluate.py); C++ evaluates the same file
# (build/bin/model_weights). The test accuracy must be equal exactly and the test loss within 1e-6,
# and both must be the figures the training run itself reported.
# The epoch runs over the first DDPW_BRIDGE_TRAIN_SAMPLES training images and is evaluated on the first
# DDPW_BRIDGE_TEST_SAMPLES test images (defaults 3000 and 2000: what is checked is that Python and C++
# agree on the same weights, to the image and to 1e-6, which needs weights that learned something, not
# a full epoch; 60000 and 10000 are the whole set, ~70 s alone on the course machine).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_bridge_lib.sh"
require_fashion_mnist
train_samples=${DDPW_BRIDGE_TRAIN_SAMPLES:-3000}
test_samples=${DDPW_BRIDGE_TEST_SAMPLES:-2000}
data=$FASHION
if [ "$train_samples" -lt 60000 ] || [ "$test_samples" -lt 10000 ]; then
  data=subset
  make_fashion_subset "$data" "$train_samples" "$test_samples"
fi

start=$SECONDS
DDPW_TEST_TIMEOUT=850 run_logged train.log "$BIN/step0_single_gpu" 1 1 --dataset fashion-mnist \
  --data-dir "$data" --device cpu --threads 2 --metrics metrics.csv --export-weights model.pt ||
  { tail -n 30 train.log; fail "training failed"; }
train_seconds=$((SECONDS - start))
grep -E '^Epoch 0 \||Weights exported' train.log
grep -q 'Weights exported to model.pt' train.log || fail "step 0 did not say it exported the weights"
start=$SECONDS
run_logged cpp.log "$BIN/model_weights" --dataset fashion-mnist --data-dir "$data" --threads 2 \
  --init-weights model.pt ||
  { cat cpp.log; fail "model_weights failed"; }
cpp_seconds=$((SECONDS - start)); start=$SECONDS
run_logged py.log "$PY" "$DDPW_ROOT/python/evaluate.py" model.pt --dataset fashion-mnist --data-dir "$data" \
  --threads 2 ||
  { cat py.log; fail "python/evaluate.py failed"; }
py_seconds=$((SECONDS - start))
echo "C++:    $(grep -E '^test loss' cpp.log)"
echo "Python: $(grep -E '^test loss' py.log)"

# Python == C++ on the same weights.
[ -n "$(test_count cpp.log)" ] || fail "no test figures from model_weights"
[ "$(test_count py.log)" = "$(test_count cpp.log)" ] ||
  fail "test accuracy differs: Python $(test_count py.log), C++ $(test_count cpp.log)"
d_loss=$(within "$(test_loss py.log)" "$(test_loss cpp.log)" 1e-6) ||
  fail "test loss differs by $d_loss > 1e-6: Python $(test_loss py.log), C++ $(test_loss cpp.log)"
d_first=$(within "$(first_batch_loss py.log)" "$(first_batch_loss cpp.log)" 1e-6) ||
  fail "first batch loss differs by $d_first"
d_sum=$(within "$(checksum py.log)" "$(checksum cpp.log)" 1e-6) || fail "weights checksum differs by $d_sum"

# ...and these are the weights the run trained: its own end-of-epoch evaluation (%.6g in the
# metrics file) and its final checksum (same code, same threads: the same digits).
run_loss=$(awk -F, 'NR == 2 { print $6 }' metrics.csv)
run_accuracy=$(awk -F, 'NR == 2 { print $7 }' metrics.csv)
within "$run_loss" "$(test_loss cpp.log)" "$(awk -v l="$run_loss" 'BEGIN { print 1e-5 * l }')" >/dev/null ||
  fail "the exported weights give test loss $(test_loss cpp.log), the run reported $run_loss"
correct=${run_accuracy:+$(awk -v a="$run_accuracy" -v n="$test_samples" 'BEGIN { printf "%d of %d", a * n + 0.5, n }')}
[ "$correct" = "$(test_count cpp.log)" ] ||
  fail "the exported weights get $(test_count cpp.log) right, the run reported accuracy $run_accuracy"
[ "$(checksum train.log)" = "$(checksum cpp.log)" ] ||
  fail "checksum of the exported weights $(checksum cpp.log), the run ended with $(checksum train.log)"

pass "one epoch of $train_samples Fashion-MNIST images (train ${train_seconds} s): test accuracy $(test_count py.log) in Python and" \
     "C++; test loss $(test_loss py.log) (|diff| $d_loss), first batch loss |diff| $d_first, checksum |diff|" \
     "$d_sum; evaluation C++ ${cpp_seconds} s, Python ${py_seconds} s"
