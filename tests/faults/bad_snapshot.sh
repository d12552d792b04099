#!/usr/bin/env bash
# Fault: a snapshot that is truncated, corrupt (flipped bytes), written by another model or by
# another program (the step 2 solution's, found by the step 2 exercise). The program must stop with
# exit 1 and an error naming the file, leave the file byte for byte as it was, and not quietly
# train from scratch; --fresh then starts again on purpose. Errors name the rank and host.
source "$(dirname "$0")/lib.sh"
sum() { sha256sum "$1" | cut -d' ' -f1; }
patch() { python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); f.write(eval(sys.argv[3]))' "$@"; }
flip() { patch "$1" "$2" 'bytes([open(sys.argv[1], "rb").read()[int(sys.argv[2])] ^ 0x01])'; }
syn=(--threads 1)
cnn=(--dataset mnist --data-dir "$WORK/tiny" --batch-size 64 --threads 1)

# Two good snapshots: the synthetic workload's linear model, and the CNN on a tiny MNIST set.
run_logged syn.log "$STEP0" 3 1 "${syn[@]}" --snapshot syn.pt || { cat syn.log; fail "synthetic run failed"; }
make_idx tiny 64
run_logged cnn.log "$STEP0" 1 1 "${cnn[@]}" --snapshot cnn.pt || { cat cnn.log; fail "CNN run failed"; }
size=$(stat -c %s syn.pt)

# case NAME REGEX SOURCE DAMAGE [ARGS...]: copies SOURCE to NAME/snapshot-step0.pt (step 0's own
# file), damages it with the shell command DAMAGE (run inside NAME), resumes with ARGS; the error
# must match REGEX.
snap=snapshot-step0.pt
run_case() {
  local name=$1 regex=$2 source=$3 damage=$4; shift 4
  mkdir "$name" && cp "$source" "$name/$snap" && cd "$name"
  eval "$damage"
  local before; before=$(sum $snap)
  expect_error "$name" 8 1 "^\[rank 0 @ [^]]+\] error: snapshot '[^']*$snap' $regex.*--fresh" "$STEP0" 5 1 "$@"
  [ "$(sum $snap)" = "$before" ] || fail "$name: the snapshot was changed"
  ! grep -qE 'Epoch 0|snapshot saved' "$LOG" || fail "$name: training started from scratch instead of stopping"
  [ -z "$(find . -name "$snap.tmp*")" ] || fail "$name: a temporary snapshot was left behind"
  cd "$WORK"
}

run_case empty        'is truncated \(0 bytes\)'                    syn.pt ": > $snap"                    "${syn[@]}"
run_case cut_header   'is truncated \(10 bytes\)'                   syn.pt "truncate -s 10 $snap"         "${syn[@]}"
run_case cut_half     'is truncated or padded'                      syn.pt "truncate -s $((size / 2)) $snap" "${syn[@]}"
run_case padded       'is truncated or padded'                      syn.pt "printf x >> $snap"            "${syn[@]}"
run_case magic        'is not a ddp-workshop snapshot'              syn.pt "flip $snap 0"                 "${syn[@]}"
run_case version      'has format version'                          syn.pt "flip $snap 9"                 "${syn[@]}"
run_case flip_payload 'is corrupt \(checksum mismatch\)'            syn.pt "flip $snap $((size / 2))"     "${syn[@]}"
run_case flip_last    'is corrupt \(checksum mismatch\)'            syn.pt "flip $snap $((size - 1))"     "${syn[@]}"
run_case not_ours     'is not a ddp-workshop snapshot'              syn.log 'true'                              "${syn[@]}"
# Another workload: the CNN's snapshot for the linear model, and the other way round. The file
# says what wrote it, so the refusal names both runs.
run_case cnn_into_linear "was written by step0_single_gpu training mnist, not by this run, step0_single_gpu training synthetic" \
  cnn.pt 'true' "${syn[@]}"
run_case linear_into_cnn "was written by step0_single_gpu training synthetic, not by this run, step0_single_gpu training mnist" \
  syn.pt 'true' "${cnn[@]}"
# Files that claim the right writer but hold another model: another shape under the same tensor
# names, and the CNN's tensors labelled as the linear model's; rewritten with the venv's torch.
if [ -x "$VENV_BIN/python" ]; then
  craft() {  # craft SOURCE OUT PYTHON: edits the archive (`archive`), keeps the header, new CRC
    "$VENV_BIN/python" - "$1" "$2" "$3" <<'PY' || fail "could not craft $2"
import io, struct, sys, zlib, torch
raw = open(sys.argv[1], "rb").read()
archive = torch.jit.load(io.BytesIO(raw[24:]))  # header: magic, version, size, CRC-32
exec(sys.argv[3])
out = io.BytesIO(); torch.jit.save(archive, out); payload = out.getvalue()
open(sys.argv[2], "wb").write(raw[:12] + struct.pack("<QI", len(payload), zlib.crc32(payload)) + payload)
PY
  }
  craft syn.pt reshaped.pt 'archive._c.setattr("model/fc.weight", torch.zeros(1, 21))'
  run_case reshaped "holds 'fc.weight' of shape \\[1, 21\\] but the model's is \\[1, 20\\]" reshaped.pt 'true' "${syn[@]}"
  craft cnn.pt cnn_labelled_synthetic.pt 'archive._c.setattr("meta/dataset", "synthetic")'
  run_case cnn_into_linear_same_label "has no tensor 'fc.weight': it was written by another model" \
    cnn_labelled_synthetic.pt 'true' "${syn[@]}"
else
  echo "note: no $VENV_BIN/python with torch: the same-writer-other-model cases are not run"
fi

# Two ranks (step 2, launched by hand as torchrun would): both refuse, neither hangs, and each
# error line says which rank on which host wrote it (a merged srun log names nobody otherwise).
mkdir two_ranks && cp syn.pt two_ranks/snapshot-step2-solution.pt && cd two_ranks
flip snapshot-step2-solution.pt $((size / 2))
before=$(sum snapshot-step2-solution.pt); port=$(free_port); start=$(now)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout --kill-after=5 30 "$STEP2" 5 1 --threads 1 --rendezvous-timeout 10 --collective-timeout 10 >rank$r.log 2>&1 &
  STARTED_PIDS+=($!)
done
for r in 0 1; do
  wait_bounded "${STARTED_PIDS[$r]}" 30; rc=$RC
  [ "$rc" -eq 1 ] || { cat rank$r.log; fail "two ranks: rank $r exited $rc, expected 1"; }
  grep -qE "^\[rank $r @ $(hostname)\] error: snapshot '[^']*' is corrupt" rank$r.log ||
    { cat rank$r.log; fail "two ranks: rank $r did not name itself, its host and the snapshot"; }
done
late "$start" 15 && fail "two ranks took $(took_text)"; elapsed=$(took_text)
[ "$(sum snapshot-step2-solution.pt)" = "$before" ] || fail "two ranks: the snapshot was changed"
echo "ok   two ranks (step 2): both exit 1 naming the corrupt snapshot in $elapsed: $(head -n1 rank1.log | cut -c1-80)"
cd "$WORK"

# The step 2 solution under torchrun, then the step 2 exercise in the same folder (measured once:
# the exercise "resumed at epoch 5" from the solution's snapshot, trained nothing and printed the
# solution's checksum). Now each has its own default file, and the solution's file, given to the
# exercise on purpose, is refused by name.
if command -v torchrun >/dev/null; then
  mkdir exercise_after_solution && cd exercise_after_solution
  expect_error "solution under torchrun" 60 0 'final weights checksum' \
    torchrun --standalone --nproc_per_node=2 --no-python "$STEP2" 2 1 --threads 1
  [ -s snapshot-step2-solution.pt ] || fail "the solution wrote no snapshot-step2-solution.pt"
  before=$(sum snapshot-step2-solution.pt)
  expect_error "the exercise next to it" 60 0 '^Epoch 1 \|' "$BIN/step2_env_launch" 2 1 --threads 1 --master-port "$(free_port)"
  ! grep -q 'Resuming' "$LOG" || fail "the exercise resumed the solution's snapshot"
  [ -s snapshot-step2-exercise.pt ] || fail "the exercise wrote no snapshot-step2-exercise.pt"
  expect_error "the exercise given the solution's file" 60 1 \
    "snapshot 'snapshot-step2-solution.pt' was written by step2_env_launch \(solution\) training synthetic, not by this run, step2_env_launch \(exercise\) training synthetic.*fix: give this run its own file with --snapshot PATH, or start it over with --fresh" \
    "$BIN/step2_env_launch" 2 1 --threads 1 --master-port "$(free_port)" --snapshot snapshot-step2-solution.pt
  [ "$(sum snapshot-step2-solution.pt)" = "$before" ] || fail "the exercise changed the solution's snapshot"
  cd "$WORK"
else
  echo "note: torchrun not found: the exercise-after-solution case is not run"
fi

# --fresh: the explicit way out. It trains from epoch 0, then the new snapshot resumes.
cd flip_payload
expect_error "fresh start" 15 0 'Epoch 0 \|' "$STEP0" 2 1 "${syn[@]}" --fresh
grep -q 'Resuming' "$LOG" && fail "--fresh resumed"
expect_error "resume after fresh" 15 0 'Resuming training from snapshot snapshot-step0.pt at epoch 2' "$STEP0" 3 1 "${syn[@]}"
pass "damaged, foreign or other programs' snapshots are refused by name and left untouched; --fresh starts again"
