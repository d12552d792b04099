#!/usr/bin/env bash
# Step 5: metrics and the Python bridge come with the trainer. A zero2 run under torchrun writes one
# metrics CSV (rank 0: a header and one row per epoch) and exports its final weights (--export-weights:
# the full model, reassembled from the ranks' shards); Python loads the file (python/evaluate.py) and
# gets the run's own weights checksum. A ddp run started from that file (--init-weights) with a
# learning rate too small to move a float32 weight ends with the same checksum: the weights loaded.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_bridge_lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
STEP5=$BIN/solutions/step5_trainer

run_logged zero2.log torchrun --standalone --nproc_per_node=2 --no-python "$STEP5" --epochs 3 --strategy zero2 \
  --threads 1 --metrics metrics.csv --export-weights model.pt || { cat zero2.log; fail "zero2 run failed"; }
grep -q 'Weights exported to model.pt' zero2.log || fail "the trainer did not export the weights"
[ "$(grep -c . metrics.csv)" -eq 4 ] && head -n1 metrics.csv | grep -q '^epoch,world_size' ||
  { cat metrics.csv; fail "metrics.csv: expected a header and 3 rows"; }
trained=$(checksum zero2.log | sort -u)
[ "$(echo "$trained" | wc -l)" -eq 1 ] || fail "the ranks ended with different weights: $trained"

run_logged py.log "$PY" "$DDPW_ROOT/python/evaluate.py" model.pt --threads 1 || { cat py.log; fail "evaluate.py failed"; }
python=$(checksum py.log)
[ -n "$python" ] && [ "$python" = "$trained" ] || fail "Python read checksum $python, the run ended with $trained"
echo "ok   zero2 run: metrics.csv of 3 epochs; exported weights read in Python with the run's checksum $python"

run_logged init.log "$STEP5" --epochs 1 --gpus 2 --strategy ddp --threads 1 --init-weights model.pt --lr 1e-300 \
  --snapshot init.pt --master-port "$(free_port)" || { cat init.log; fail "--init-weights run failed"; }
started=$(checksum init.log | sort -u)
[ "$started" = "$trained" ] || fail "--init-weights model.pt with lr 1e-300: checksum $started, expected $trained"
echo "ok   ddp run from --init-weights model.pt (lr 1e-300): checksum $started"
pass "step 5: metrics, --export-weights (read in Python) and --init-weights through the trainer"
