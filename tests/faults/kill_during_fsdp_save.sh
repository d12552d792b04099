#!/usr/bin/env bash
# Fault: one rank SIGKILLed while an FSDP snapshot is being saved (a rank lost in the middle of a
# save: its shard half written, or the others' written and the manifest still the old one). Each
# save writes every rank's shard under a new generation number and rank 0's manifest last, listing
# each shard's size and CRC-32. After any kill, the next run must resume from a whole snapshot (the
# previous one, or the new one if its manifest made it), never from a mix; and a shard of another
# save put beside the manifest is refused, naming the file.
# Step 6 (FSDP, the tiny GPT, 2 ranks under torchrun), 2 steps an epoch and a save after each: the
# run spends much of its time saving; the first kill lands at a random moment after a save, the others
# wait for a shard newer than the manifest's (a save under way). A save can end between the shard's
# appearance and the kill (its window is milliseconds), so kills go on, up to 5, until one is mid-save.
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found"
STEP6=$BIN/solutions/step6_fully_sharded
launch=(torchrun --standalone --nproc_per_node=2 --no-python "$STEP6")
common=(--model gpt --device cpu --steps 2 --threads 1 --snapshot fsdp.json --rendezvous-timeout 30
        --collective-timeout 10)
generation() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' fsdp.json; }
epochs_run() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["training"]["epochs_run"])' fsdp.json; }

kills=0 torn=0
for i in 1 2 3 4 5; do
  [ "$i" -le 2 ] || [ "$torn" -eq 0 ] || break
  kills=$i
  "${launch[@]}" 100000 1 "${common[@]}" >"train$i.log" 2>&1 &
  agent=$!; STARTED_PIDS+=("$agent")
  wait_for_line "train$i.log" 'snapshot saved' 60
  victim=$(torchrun_worker "$agent" 1)
  [ -n "$victim" ] || fail "no worker with RANK=1"
  if [ "$i" -eq 1 ]; then
    sleep "0.$((RANDOM % 300))"
  else  # until a shard of the next generation exists (its save is under way), busy: a save is short
    next=$(( $(generation) + 1 )) end=$((SECONDS + 20))
    until compgen -G "fsdp.json.g$next.rank*" >/dev/null || [ "$SECONDS" -ge "$end" ]; do :; done
  fi
  kill -9 "$victim"
  wait_bounded "$agent" 60
  gen=$(generation)
  if compgen -G "fsdp.json.g$((gen + 1)).rank*" >/dev/null; then torn=$((torn + 1)); fi

  # The survivor: resumes from the manifest's snapshot (nothing left to train with 1 epoch) and ends.
  expect_error "resume after kill $i" 90 0 'final weights checksum' "${launch[@]}" 1 1 "${common[@]}"
  grep -qE "Resuming training from snapshot fsdp.json at epoch $(epochs_run)" "$LOG" ||
    { cat "$LOG"; fail "kill $i: did not resume at the manifest's epoch $(epochs_run)"; }
  [ "$i" != 1 ] || cp "fsdp.json.g$gen.rank1-of-2" shard-of-another-save
done
[ "$torn" -ge 1 ] || fail "no kill left a save half done (a shard newer than the manifest)"

# A shard from another save beside the manifest: refused, naming the file; nothing changes.
gen=$(generation)
cp shard-of-another-save "fsdp.json.g$gen.rank1-of-2"
before=$(sha256sum fsdp.json)
expect_error "a shard of another save" 90 1 "fsdp.json.g$gen.rank1-of-2.*(another save|checksum)" \
  "${launch[@]}" 1 1 "${common[@]}"
[ "$(sha256sum fsdp.json)" = "$before" ] || fail "the refused load changed the manifest"
pass "$kills SIGKILLs of rank 1 during FSDP training and saving, $torn of them mid-save: each time the next run resumed from a whole snapshot; a shard of another save was refused"
