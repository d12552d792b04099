#!/usr/bin/env bash
# Fault: SIGKILL at any moment, including while a snapshot is being written. The snapshot on disk
# must always be a complete one that loads (save_snapshot writes a temp file, fsyncs, renames).
# The CNN on 8 tiny images spends most of its time writing its 14 MB snapshot (--save-every 1),
# so random kills land mid-write often; every other kill waits for the temp file to appear, so
# some surely do. After each kill, a run with nothing left to train must load the snapshot.
source "$(dirname "$0")/lib.sh"
make_idx tiny 8
data=(--dataset mnist --data-dir "$WORK/tiny" --batch-size 8 --threads 1)
kills=8 mid_write=0 last_epoch=0
for i in $(seq "$kills"); do
  "$STEP0" 100000 1 "${data[@]}" >"train$i.log" 2>&1 &
  pid=$!; STARTED_PIDS+=("$pid")
  wait_for_line "train$i.log" 'snapshot saved' 30
  if [ $((i % 2)) -eq 1 ]; then
    sleep "0.$((RANDOM % 400))"
  else  # until the next snapshot's temp file exists (the pid in its name is this run's): busy,
    end=$((SECONDS + 10))  # as a write lasts only ~50 ms
    until [ -e "snapshot-step0.pt.tmp.$pid" ] || [ "$SECONDS" -ge "$end" ]; do :; done
  fi
  kill -9 "$pid"; wait_bounded "$pid" 10
  if [ -e "snapshot-step0.pt.tmp.$pid" ]; then mid_write=$((mid_write + 1)); fi

  # The survivor: loads (nothing left to train with TOTAL_EPOCHS 1), is not rewritten.
  before=$(sha256sum snapshot-step0.pt)
  expect_error "load after kill $i" 10 0 'final weights checksum' "$STEP0" 1 1 "${data[@]}"
  epoch=$(sed -nE 's/.*Resuming training from snapshot .* at epoch ([0-9]+), step 0/\1/p' "$LOG")
  [ -n "$epoch" ] || { cat "$LOG"; fail "kill $i: the snapshot did not load"; }
  [ "$epoch" -ge "$last_epoch" ] || fail "kill $i: snapshot at epoch $epoch, older than before ($last_epoch)"
  [ "$(sha256sum snapshot-step0.pt)" = "$before" ] || fail "kill $i: loading changed the snapshot"
  last_epoch=$epoch
done
[ "$mid_write" -ge 1 ] || fail "no kill landed while a snapshot was being written"
stale=$(find . -maxdepth 1 -name 'snapshot-step0.pt.tmp.*' | wc -l)
pass "$kills SIGKILLs, $mid_write of them mid-write: the snapshot always loaded (epoch $last_epoch); $stale stale temp files left"
