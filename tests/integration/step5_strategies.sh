#!/usr/bin/env bash
# Step 5: the trainer's strategies give the hand-written steps' results. With the same model, seed,
# epochs and batch: --strategy single == step 0; --strategy ddp under torchrun (2 ranks) == step 2's
# solution under torchrun; --strategy zero1 and zero2 under torchrun == step 4's solution with --zero 1
# and 2 (the loss falls, both ranks end with equal weights, each rank writes its shard).
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
STEP5=$BIN/solutions/step5_trainer
args=(--seed 7 --batch-size 16 --threads 1)
checksums() { grep -E 'final weights checksum' "$1" | awk '{print $NF}' | sort -u; }
torchrun2=(torchrun --standalone --nproc_per_node=2 --no-python)

mkdir single && cd single || fail "cannot enter single"
run_logged step0.log "$BIN/step0_single_gpu" 3 1 "${args[@]}" || { cat step0.log; fail "step 0 failed"; }
run_logged step5.log "$STEP5" --epochs 3 --strategy single "${args[@]}" || { cat step5.log; fail "trainer single failed"; }
grep -qE '^strategy +\| single' step5.log || { cat step5.log; fail "no 'strategy | single' row"; }
a=$(checksums step0.log); b=$(checksums step5.log)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "--strategy single: checksum $b, step 0: $a"
echo "ok   --strategy single == step 0: $b"
cd ..

mkdir ddp && cd ddp || fail "cannot enter ddp"
mkdir step2 && (cd step2 && run_logged ../step2.log "${torchrun2[@]}" "$BIN/solutions/step2_env_launch" 3 1 "${args[@]}") \
  || { cat step2.log; fail "step 2 failed"; }
run_logged step5.log "${torchrun2[@]}" "$STEP5" --epochs 3 --strategy ddp "${args[@]}" || { cat step5.log; fail "trainer ddp failed"; }
check_training_log step5.log 2 "[CPU0]" >/dev/null
grep -qE '^launcher +\| torchrun' step5.log || fail "the trainer did not see torchrun"
a=$(checksums step2.log); b=$(checksums step5.log)
[ "$(echo "$a" | wc -l)" -eq 1 ] && [ -n "$a" ] && [ "$a" = "$b" ] || fail "--strategy ddp: checksum $b, step 2: $a"
echo "ok   --strategy ddp under torchrun == step 2 under torchrun: $b"
cd ..

for strategy in zero1 zero2; do
  mkdir "$strategy" && cd "$strategy" || fail "cannot enter $strategy"
  run_logged step5.log "${torchrun2[@]}" "$STEP5" --epochs 3 --strategy "$strategy" "${args[@]}" \
    || { cat step5.log; fail "trainer $strategy failed"; }
  grep -qE "^ZeRO stage +\| ${strategy#zero}: " step5.log || { cat step5.log; fail "$strategy: no ZeRO stage row"; }
  a=$(first_loss step5.log); b=$(last_loss step5.log)
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }' || fail "$strategy: loss did not fall ($a -> $b)"
  [ "$(grep -c 'final weights checksum' step5.log)" -eq 2 ] || fail "$strategy: expected 2 checksum lines"
  sums=$(checksums step5.log)
  [ "$(echo "$sums" | wc -l)" -eq 1 ] || fail "$strategy: the ranks ended with different weights: $sums"
  mkdir step4 && (cd step4 && run_logged ../step4.log "${torchrun2[@]}" "$BIN/solutions/step4_sharded" 3 1 \
    --zero "${strategy#zero}" "${args[@]}") || { cat step4.log; fail "step 4 --zero ${strategy#zero} failed"; }
  step4=$(checksums step4.log)
  [ -n "$step4" ] && [ "$step4" = "$sums" ] || fail "--strategy $strategy: checksum $sums, step 4 --zero ${strategy#zero}: $step4"
  # A sharded snapshot: the manifest and one shard per rank.
  grep -q '"shards"' snapshot-step5-solution.pt || fail "$strategy: the snapshot is not a sharded manifest"
  [ "$(find . -maxdepth 1 -name 'snapshot-step5-solution.pt.g*.rank*-of-2' | wc -l)" -eq 2 ] || { ls -la; fail "$strategy: expected 2 shards"; }
  echo "ok   --strategy $strategy under torchrun == step 4 --zero ${strategy#zero}: loss $a -> $b, both ranks $sums, 2 shards"
  cd ..
done
pass "step 5's strategies: single == step 0, ddp == step 2, zero1/zero2 == step 4"
