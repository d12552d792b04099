#!/usr/bin/env bash
# --precision bf16|fp16 through the unchanged step programs and the trainer (the course's workload
# carries it): step 0 in bf16, step 2 under torchrun in fp16 (2 ranks, DDP, the loss scaler), step 4
# under torchrun with a ds_config.json whose fp16 section sets the scaler (ZeRO-2, the scaler taken
# from the model), the trainer's zero2 in bf16 with 2 workers. Each: the settings table's precision
# row, the loss fell, every rank ended with the same weights. Then a run resumes a stopped fp16 run's
# snapshot (the scaler's state is in it), and --precision against the config's fp16 is an error.
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
common=(--device cpu --threads 1)

mkdir step0 && cd step0 || exit 1
run_logged out.log "$BIN/step0_single_gpu" 4 2 "${common[@]}" --precision bf16 || { cat out.log; fail "step 0 bf16 failed"; }
grep -qE '^precision +\| bf16: autocast bfloat16' out.log || { cat out.log; fail "no bf16 precision row"; }
echo "step 0, bf16: $(check_training_log out.log 1 "[CPU0]")"
cd .. || exit 1

mkdir step2 && cd step2 || exit 1
run_logged out.log torchrun --standalone --nproc_per_node=2 --no-python "$BIN/solutions/step2_env_launch" 4 2 \
  "${common[@]}" --precision fp16 || { cat out.log; fail "step 2 fp16 failed"; }
grep -qE '^precision +\| fp16: autocast float16, loss scale 2\^16 \(dynamic: x2 after 2000 steps' out.log ||
  { cat out.log; fail "no fp16 precision row with PyTorch's defaults"; }
echo "step 2, fp16, 2 ranks: $(check_training_log out.log 2 "[CPU0]")"
cd .. || exit 1

mkdir step4 && cd step4 || exit 1
cat > ds_config.json <<'JSON'
{"train_batch_size": 64, "zero_optimization": {"stage": 2},
 "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 100, "hysteresis": 2,
          "min_loss_scale": 1}}
JSON
run_logged out.log torchrun --standalone --nproc_per_node=2 --no-python "$BIN/solutions/step4_sharded" 4 2 \
  "${common[@]}" --deepspeed-config ds_config.json || { cat out.log; fail "step 4 fp16 failed"; }
grep -qE '^precision +\| fp16: autocast float16, loss scale 2\^12 \(dynamic: x2 after 100 steps .* x0.5 at each overflow but the first 1 since it last grew \(hysteresis 2\), at least 1\)' out.log ||
  { cat out.log; fail "the config's loss scaler is not in the precision row"; }
python3 - snapshot-step4-solution.pt <<'PY' || fail "the manifest does not hold the scaler's state"
import json, sys
m = json.load(open(sys.argv[1]))
s = m["grad_scaler"]
assert s["scale"] > 0 and s["growth_tracker"] >= 0, s
assert m["optimizer"]["steps_applied"] <= m["optimizer"]["steps_taken"], m["optimizer"]
print(f"manifest: scale {s['scale']:g}, growth tracker {s['growth_tracker']}, "
      f"Adam steps applied {m['optimizer']['steps_applied']} of {m['optimizer']['steps_taken']}")
PY
echo "step 4, fp16 from ds_config.json, ZeRO-2, 2 ranks: weights checksum $(grep -m1 'final weights checksum' out.log | awk '{print $NF}')"
[ "$(grep -E 'final weights checksum' out.log | awk '{print $NF}' | sort -u | wc -l)" -eq 1 ] ||
  fail "ranks ended with different weights"
# Two more epochs from that snapshot: it resumes (scale and all) and trains on.
run_logged resume.log torchrun --standalone --nproc_per_node=2 --no-python "$BIN/solutions/step4_sharded" 6 2 \
  "${common[@]}" --deepspeed-config ds_config.json || { cat resume.log; fail "the fp16 resume failed"; }
grep -q 'Resuming training from snapshot snapshot-step4-solution.pt at epoch 4' resume.log ||
  { cat resume.log; fail "did not resume"; }
grep -qE '^Epoch 5 \|' resume.log || fail "the resumed run did not train on"
# --precision against the config's fp16: the user must choose.
rc=0
"$BIN/solutions/step4_sharded" 1 1 "${common[@]}" --deepspeed-config ds_config.json --precision bf16 >conflict.log 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat conflict.log; fail "a conflicting --precision gave exit code $rc, not 2"; }
grep -q "the precision is given twice: --precision bf16 and ds_config.json's fp16.enabled" conflict.log ||
  { cat conflict.log; fail "the conflict is not named"; }
cd .. || exit 1

mkdir step5 && cd step5 || exit 1
run_logged out.log "$BIN/solutions/step5_trainer" --epochs 4 --gpus 2 --strategy zero2 "${common[@]}" --precision bf16 ||
  { cat out.log; fail "the trainer's zero2 in bf16 failed"; }
grep -qE '^precision +\| bf16' out.log || { cat out.log; fail "no bf16 precision row"; }
a=$(first_loss out.log); b=$(last_loss out.log)
awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }' || fail "loss did not fall ($a -> $b)"
[ "$(grep -E 'final weights checksum' out.log | awk '{print $NF}' | sort -u | wc -l)" -eq 1 ] ||
  fail "ranks ended with different weights"
echo "step 5, zero2, bf16, 2 workers: loss $a -> $b"
cd .. || exit 1
pass "bf16 and fp16 through steps 0, 2, 4 and 5 unchanged; the fp16 ZeRO snapshot holds the scaler and resumes"
