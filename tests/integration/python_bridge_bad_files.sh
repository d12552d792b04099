#!/usr/bin/env bash
# Bad --init-weights files: a Python pickle of something else, a list, a training checkpoint, a
# truncated file, the state_dict of another model, a wrong shape, a wrong dtype. Each one stops
# step 0 (and model_weights) with exit code 1 and a message that names the problem, before
# anything is written: the existing snapshot and --export-weights file stay byte for byte as they
# were, and no temp file is left behind. A missing file is a usage error (exit code 2).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_bridge_lib.sh"

# A snapshot and an exported file from an earlier run: what a bad start must not overwrite.
run_logged first.log "$BIN/step0_single_gpu" 1 1 --device cpu --snapshot snapshot.pt --export-weights out.pt ||
  { cat first.log; fail "step 0 failed"; }
before=$(sha256sum snapshot.pt out.pt)

"$PY" - <<'PY'
import pickle, torch
from ddpw import LinearRegressor, MnistCnn
linear = LinearRegressor()
with open("pickle.pt", "wb") as f:
    pickle.dump({"fc.weight": [[0.0] * 20], "fc.bias": [0.0]}, f)       # a Python pickle of something else
torch.save([linear.fc.weight, linear.fc.bias], "list.pt")               # torch.save of a list
torch.save({"model": linear.state_dict(), "epoch": 3}, "checkpoint.pt")  # a training checkpoint
torch.save(MnistCnn().state_dict(), "cnn.pt")                           # the state_dict of another model
wide = LinearRegressor(21)
torch.save(wide.state_dict(), "shape.pt")                               # the right keys, a wrong shape
torch.save(linear.double().state_dict(), "dtype.pt")                    # the right keys, float64
torch.save(LinearRegressor().state_dict(), "good.pt")
PY
head -c "$(( $(stat -c %s good.pt) / 2 ))" good.pt > truncated.pt

# expect_refused FILE PATTERN: step 0 and model_weights exit 1 naming the problem, nothing written.
expect_refused() {
  local file=$1 pattern=$2 rc=0
  run_logged "$file.step0.log" "$BIN/step0_single_gpu" 1 1 --device cpu --snapshot snapshot.pt \
    --export-weights out.pt --init-weights "$file" || rc=$?
  [ "$rc" -eq 1 ] || { cat "$file.step0.log"; fail "$file: step 0 exited $rc, expected 1"; }
  grep -qE "$pattern" "$file.step0.log" || { cat "$file.step0.log"; fail "$file: no message matching '$pattern'"; }
  grep -qE 'Epoch 0|snapshot saved|Weights exported' "$file.step0.log" && fail "$file: step 0 trained or wrote"
  rc=0
  run_logged "$file.mw.log" "$BIN/model_weights" --init-weights "$file" --export-weights out.pt || rc=$?
  [ "$rc" -eq 1 ] && grep -qE "$pattern" "$file.mw.log" || { cat "$file.mw.log"; fail "$file: model_weights"; }
  [ "$(sha256sum snapshot.pt out.pt)" = "$before" ] || fail "$file: the snapshot or out.pt changed"
  [ -z "$(find . -name '*.tmp.*')" ] || fail "$file: a temp file was left behind"
  echo "refused $file: $(grep -m1 -E 'error' "$file.step0.log")"
}
expect_refused pickle.pt "plain Python pickle, not the zip archive torch.save writes"
expect_refused list.pt "holds a list, not a state_dict"
expect_refused checkpoint.pt "holds 'model': a dict, not a tensor"
expect_refused truncated.pt "is truncated or damaged"
expect_refused cnn.pt "does not fit the model.*missing fc.weight \[1, 20\].*unexpected conv1.bias \[32\].*twin module of python/ddpw/models.py"
expect_refused shape.pt "fc.weight has shape \[1, 21\] in the file, \[1, 20\] in the model"
expect_refused dtype.pt "fc.bias is float64 in the file, float32 in the model"
expect_refused snapshot.pt "is a training snapshot \(save_snapshot\), not a state_dict"

rc=0
run_logged missing.log "$BIN/step0_single_gpu" 1 1 --device cpu --init-weights no-such.pt || rc=$?
[ "$rc" -eq 2 ] && grep -q "init-weights 'no-such.pt' does not exist" missing.log ||
  { cat missing.log; fail "missing file"; }
# The good file of the same batch loads (the checks above are about the files, not the option).
run_logged good.log "$BIN/step0_single_gpu" 1 1 --device cpu --snapshot good.snap --init-weights good.pt ||
  { cat good.log; fail "a good state_dict was refused"; }
pass "8 bad files refused with exit 1 by step 0 and model_weights, nothing overwritten; a missing one exit 2"
