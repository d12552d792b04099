#!/usr/bin/env bash
# Step 4's sharded snapshots with the real program (2 ranks under torchrun, ZeRO-2, DeepSpeed's
# Adam, WarmupLR and clipping from a ds_config.json):
#   * SIGTERM to one worker: both ranks stop at one step, each writes its shard, both exit 75; the
#     same command resumes and ends with the weights of an uninterrupted run, bit for bit;
#   * resumed by 3 ranks, and by 1 process, the snapshot of 2 reshards and training continues (the
#     new manifest lists 3 shards, or 1; the 2-rank shards are gone);
#   * a missing shard and a corrupt shard are refused naming the file; no file is changed;
#   * the exercise's snapshot (a plain DDP one) is refused by the solution; the file is left as it was.
source "$(dirname "$0")/../faults/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
STEP4=$BIN/solutions/step4_sharded
# Puhti's config without its batch keys (--batch-size 2: 512 steps an epoch, time to stop mid-epoch;
# 3 ranks could not split its 400) and with a warm-up that ends within the run.
python3 - "${DDPW_ROOT:?}/clusters/puhti/ds_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
del c["train_batch_size"]
c["scheduler"]["params"]["warmup_num_steps"] = 100
json.dump(c, open("ds_config.json", "w"))
PY
config=$WORK/ds_config.json
args=(4 1 --device cpu --batch-size 2 --threads 1 --zero 2 --deepspeed-config "$config" --rendezvous-timeout 30
      --collective-timeout 20)
torchrun2=(torchrun --standalone --nproc_per_node=2 --no-python "$STEP4")
manifest=snapshot-step4-solution.pt

mkdir ref && (cd ref && run_logged out.log "${torchrun2[@]}" "${args[@]}") || { cat ref/out.log; fail "uninterrupted run failed"; }
expected=$(final_checksum ref/out.log)
[ -n "$expected" ] || fail "no checksum in the uninterrupted run"

# ---- stop with SIGTERM, resume with the same world size: exact ---------------------------------
mkdir stopped
cd stopped || exit 1
"${torchrun2[@]}" "${args[@]}" >part1.log 2>&1 &
agent=$!; STARTED_PIDS+=("$agent")
wait_for_line part1.log '\(1 epochs run, step 0\)' 90
sleep 0.1  # into the epoch
victim=$(torchrun_worker "$agent" 0)
[ -n "$victim" ] || fail "no worker with RANK=0"
kill -TERM "$victim"
wait_bounded "$agent" 60
stops=$(grep -oE '^\[CPU[01]\] Stopping at epoch [0-9]+, step [0-9]+' part1.log | sed 's/^\[CPU[01]\] //' | sort | uniq -c)
[ "$(echo "$stops" | wc -l)" -eq 1 ] && [ "$(echo "$stops" | awk '{print $1}')" -eq 2 ] ||
  { cat part1.log; fail "the ranks did not stop at one step: $stops"; }
[ "$(grep -cE 'exitcode *: 75 ' part1.log)" -eq 2 ] || { cat part1.log; fail "not both workers exited 75"; }
STOP=$(echo "$stops" | sed -E 's/^ *2 Stopping //')  # "at epoch E, step S"
epoch=${STOP#at epoch }; epoch=${epoch%%,*}; step=${STOP##*step }
grep -q "snapshot saved at $manifest ($epoch epochs run, step $step)" part1.log || { cat part1.log; fail "no snapshot at the stop"; }
echo "ok   SIGTERM to rank 0: both ranks stopped $STOP, exit 75, a shard each"
cd .. || exit 1
for copy in three one missing corrupt; do cp -a stopped "$copy"; done

cd stopped || exit 1
run_logged part2.log "${torchrun2[@]}" "${args[@]}" || { cat part2.log; fail "the resumed run failed"; }
grep -q "Resuming training from snapshot $manifest $STOP" part2.log || { cat part2.log; fail "did not resume $STOP"; }
got=$(grep 'final weights checksum' part2.log | awk '{print $NF}' | sort -u)
[ "$(grep -c 'final weights checksum' part2.log)" -eq 2 ] && [ "$got" = "$expected" ] ||
  fail "stopped and resumed: checksums '$got', uninterrupted $expected"
echo "ok   resumed $STOP with 2 ranks: final weights equal the uninterrupted run's ($got)"
cd .. || exit 1

# ---- resume with another world size: the shards are reassembled and split again ----------------
# check_resharded LOG RANKS: resumed at the start of the stopped epoch (the data shards differ),
# trained to the end, every rank the same weights; the manifest now lists RANKS shards.
check_resharded() {
  local log=$1 ranks=$2
  grep -q "Resuming training from snapshot $manifest at epoch $epoch, step 0" "$log" || { cat "$log"; fail "$ranks rank(s) did not resume epoch $epoch"; }
  # (a stop that fell on an epoch's first step restarts nothing: no warning then)
  [ "$step" -eq 0 ] || grep -q "was taken by 2 rank(s) at step $step of epoch $epoch; with $ranks" "$log" ||
    { cat "$log"; fail "no warning about the restarted epoch"; }
  [ "$(grep -c 'final weights checksum' "$log")" -eq "$ranks" ] || { cat "$log"; fail "expected $ranks checksum lines"; }
  [ "$(grep 'final weights checksum' "$log" | awk '{print $NF}' | sort -u | wc -l)" -eq 1 ] || fail "the $ranks ranks ended with different weights"
  grep -q "Training snapshot saved at $manifest (4 epochs run, step 0)" "$log" || fail "$ranks rank(s) did not finish the 4 epochs"
  python3 - "$manifest" "$ranks" <<'PY' || fail "the manifest after the $ranks-rank run is wrong"
import json, sys
m = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert m["world_size"] == n and [s["rank"] for s in m["shards"]] == list(range(n)), m["shards"]
PY
  [ -z "$(find . -maxdepth 1 -name "$manifest.g*-of-2")" ] || { ls; fail "the 2-rank shards were left behind"; }
  echo "ok   resumed by $ranks rank(s): resharded, epoch $epoch again, trained to the end ($(last_loss "$log") final loss)"
}
(cd three && run_logged out.log torchrun --standalone --nproc_per_node=3 --no-python "$STEP4" "${args[@]}") ||
  { cat three/out.log; fail "the 3-rank resume failed"; }
(cd three && check_resharded out.log 3)
(cd one && run_logged out.log "$STEP4" "${args[@]}") || { cat one/out.log; fail "the 1-process resume failed"; }
(cd one && check_resharded out.log 1)

# ---- a missing or corrupt shard: refused, naming it; nothing changed ----------------------------
# expect_refused DIR REGEX: 2 ranks refuse the snapshot in DIR with REGEX, and leave every file as it was.
expect_refused() {
  local dir=$1 regex=$2 before rc=0
  cd "$dir" || exit 1
  before=$(sha256sum -- * | grep -v '\.log$' || true)
  run_logged out.log "${torchrun2[@]}" "${args[@]}" || rc=$?
  [ "$rc" -ne 0 ] || { cat out.log; fail "$dir: the run accepted the snapshot"; }
  grep -qE "$regex" out.log || { cat out.log; fail "$dir: no message matching /$regex/"; }
  ! grep -q 'Epoch [0-9]* |' out.log || { cat out.log; fail "$dir: training started"; }
  [ "$(sha256sum -- * | grep -v '\.log$' || true)" = "$before" ] || fail "$dir: a file was changed"
  echo "ok   $dir: $(grep -m1 -oE "$regex" out.log)"
  cd .. || exit 1
}
shard0=$(cd missing && ls "$manifest".g*.rank0-of-2) shard1=$(cd missing && ls "$manifest".g*.rank1-of-2)
rm missing/"$shard1"
expect_refused missing "shard '(\./)?$shard1' \(rank 1 of 2\) that is missing"
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 0x5a]))' corrupt/"$shard0"
expect_refused corrupt "shard '(\./)?$shard0' \(rank 0 of 2\) that is corrupt \(checksum mismatch\)"

# ---- the exercise's snapshot is not the solution's ---------------------------------------------
mkdir exercise
cd exercise || exit 1
run_logged exercise.log "$BIN/step4_sharded" 1 1 --device cpu --snapshot shared.pt || { cat exercise.log; fail "the exercise did not run"; }
before=$(sha256sum shared.pt)
rc=0; run_logged solution.log "$STEP4" 2 1 --device cpu --snapshot shared.pt || rc=$?
[ "$rc" -ne 0 ] || { cat solution.log; fail "the solution resumed the exercise's snapshot"; }
grep -q "sharded snapshot 'shared.pt' is a plain snapshot, written without ZeRO by step4_sharded (exercise) training synthetic, not a sharded one; it was left untouched (fix: give this run its own file with --snapshot PATH, or start it over with --fresh" solution.log ||
  { cat solution.log; fail "the solution did not say why it refused the exercise's snapshot"; }
[ "$(sha256sum shared.pt)" = "$before" ] || fail "the exercise's snapshot was changed"
echo "ok   the exercise's snapshot: refused by the solution, left as it was"
# And the other way round: the exercise (plain snapshots) refuses the solution's manifest, naming it.
run_logged solution-first.log "$STEP4" 1 1 --device cpu --snapshot sharded.pt || { cat solution-first.log; fail "the solution did not run"; }
before=$(sha256sum sharded.pt*)
rc=0; run_logged exercise-second.log "$BIN/step4_sharded" 2 1 --device cpu --snapshot sharded.pt || rc=$?
[ "$rc" -ne 0 ] || { cat exercise-second.log; fail "the exercise resumed the solution's sharded snapshot"; }
grep -q "snapshot 'sharded.pt' is a sharded snapshot (ZeRO: a manifest and a shard per rank) written by step4_sharded (solution) training synthetic, not a plain one" exercise-second.log ||
  { cat exercise-second.log; fail "the exercise did not say whose snapshot it refused"; }
[ "$(sha256sum sharded.pt*)" = "$before" ] || fail "the solution's snapshot was changed"
echo "ok   the solution's snapshot: refused by the exercise, naming its writer, left as it was"
cd .. || exit 1
pass "step 4: exact resume after SIGTERM, resharding 2 -> 3 and 2 -> 1, bad shards and the exercise's snapshot refused"
