#!/usr/bin/env bash
# Fault: a snapshot that is truncated, corrupt (flipped bytes) or written by another model. The
# program must stop with exit 1 and an error naming the file, leave the file byte for byte as it
# was, and not quietly train from scratch; --fresh then starts again on purpose.
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

# case NAME REGEX SOURCE DAMAGE [ARGS...]: copies SOURCE to NAME/snapshot.pt, damages it with the
# shell command DAMAGE (run inside NAME), resumes with ARGS; the error must match REGEX.
run_case() {
  local name=$1 regex=$2 source=$3 damage=$4; shift 4
  mkdir "$name" && cp "$source" "$name/snapshot.pt" && cd "$name"
  eval "$damage"
  local before; before=$(sum snapshot.pt)
  expect_error "$name" 8 1 "snapshot '[^']*snapshot.pt' $regex.*--fresh" "$STEP0" 5 1 "$@"
  [ "$(sum snapshot.pt)" = "$before" ] || fail "$name: the snapshot was changed"
  ! grep -qE 'Epoch 0|snapshot saved' "$LOG" || fail "$name: training started from scratch instead of stopping"
  [ -z "$(find . -name 'snapshot.pt.tmp*')" ] || fail "$name: a temporary snapshot was left behind"
  cd "$WORK"
}

run_case empty        'is truncated \(0 bytes\)'                    syn.pt ': > snapshot.pt'                    "${syn[@]}"
run_case cut_header   'is truncated \(10 bytes\)'                   syn.pt 'truncate -s 10 snapshot.pt'         "${syn[@]}"
run_case cut_half     'is truncated or padded'                      syn.pt "truncate -s $((size / 2)) snapshot.pt" "${syn[@]}"
run_case padded       'is truncated or padded'                      syn.pt 'printf x >> snapshot.pt'            "${syn[@]}"
run_case magic        'is not a ddp-workshop snapshot'              syn.pt 'flip snapshot.pt 0'                 "${syn[@]}"
run_case version      'has format version'                          syn.pt 'flip snapshot.pt 9'                 "${syn[@]}"
run_case flip_payload 'is corrupt \(checksum mismatch\)'            syn.pt "flip snapshot.pt $((size / 2))"     "${syn[@]}"
run_case flip_last    'is corrupt \(checksum mismatch\)'            syn.pt "flip snapshot.pt $((size - 1))"     "${syn[@]}"
run_case not_ours     'is not a ddp-workshop snapshot'              syn.log 'true'                              "${syn[@]}"
# Another model: the CNN's snapshot into the linear model, and the other way round.
run_case cnn_into_linear "has no tensor 'fc.weight': it was written by another model" cnn.pt 'true' "${syn[@]}"
run_case linear_into_cnn "has no tensor 'conv1.weight': it was written by another model" syn.pt 'true' "${cnn[@]}"
# Same tensor names, another shape, a valid checksum: rewritten with the venv's Python torch.
if [ -x "$VENV_BIN/python" ]; then
  "$VENV_BIN/python" - syn.pt reshaped.pt <<'PY' || fail "could not craft a reshaped snapshot"
import io, struct, sys, zlib, torch
raw = open(sys.argv[1], "rb").read()
archive = torch.jit.load(io.BytesIO(raw[24:]))  # header: magic, version, size, CRC-32
archive._c.setattr("model/fc.weight", torch.zeros(1, 21))
out = io.BytesIO(); torch.jit.save(archive, out); payload = out.getvalue()
open(sys.argv[2], "wb").write(raw[:12] + struct.pack("<QI", len(payload), zlib.crc32(payload)) + payload)
PY
  run_case reshaped "holds 'fc.weight' of shape \\[1, 21\\] but the model's is \\[1, 20\\]" reshaped.pt 'true' "${syn[@]}"
else
  echo "note: no $VENV_BIN/python with torch: the same-names-other-shape case is not run"
fi

# Two ranks (step 2, launched by hand as torchrun would): both refuse, neither hangs.
mkdir two_ranks && cp syn.pt two_ranks/snapshot.pt && cd two_ranks && flip snapshot.pt $((size / 2))
before=$(sum snapshot.pt); port=$(free_port); start=$(now)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout --kill-after=5 30 "$STEP2" 5 1 --threads 1 --rendezvous-timeout 10 --collective-timeout 10 >rank$r.log 2>&1 &
  STARTED_PIDS+=($!)
done
for r in 0 1; do
  wait_bounded "${STARTED_PIDS[$r]}" 30; rc=$RC
  [ "$rc" -eq 1 ] || { cat rank$r.log; fail "two ranks: rank $r exited $rc, expected 1"; }
  grep -q "snapshot '[^']*' is corrupt" rank$r.log || { cat rank$r.log; fail "two ranks: rank $r did not name the snapshot"; }
done
elapsed=$(seconds_since "$start"); over "$elapsed" 15 && fail "two ranks took ${elapsed}s"
[ "$(sum snapshot.pt)" = "$before" ] || fail "two ranks: the snapshot was changed"
echo "ok   two ranks (step 2): both exit 1 naming the corrupt snapshot in ${elapsed}s"
cd "$WORK"

# --fresh: the explicit way out. It trains from epoch 0, then the new snapshot resumes.
cd flip_payload
expect_error "fresh start" 15 0 'Epoch 0 \|' "$STEP0" 2 1 "${syn[@]}" --fresh
grep -q 'Resuming' "$LOG" && fail "--fresh resumed"
expect_error "resume after fresh" 15 0 'Resuming training from snapshot snapshot.pt at epoch 2' "$STEP0" 3 1 "${syn[@]}"
pass "damaged or foreign snapshots are refused by name and left untouched; --fresh starts again"
