#!/usr/bin/env bash
# Step 4 under its launchers, unchanged program, with Puhti's ds_config.json (global batch 400 =
# 200 per rank, Adam, WarmupLR, clipping at norm 1): torchrun with --zero 1 and --zero 2, mpirun
# with the config's default stage (2). Every rank ends with the same weights, every rank wrote its
# shard, rank 0 the manifest (one file) that lists them; the config's unused keys are listed.
source "$(dirname "$0")/lib.sh"
config=${DDPW_ROOT:?DDPW_ROOT must point at the project}/clusters/puhti/ds_config.json
args=(3 1 --device cpu --deepspeed-config "$config")

# check_shards LOG STAGE: the settings table, the ignored keys and the files of a 2-rank ZeRO run.
check_shards() {
  local log=$1 stage=$2
  grep -qE "^ZeRO stage +\| $stage: optimizer state .*sharded over 2 rank" "$log" || { cat "$log"; fail "no 'ZeRO stage $stage' row"; }
  grep -qE '^batch size per rank +\| 200 ' "$log" || fail "train_batch_size 400 was not split over 2 ranks"
  grep -qE '^gradient clipping +\| global norm 1 ' "$log" || fail "no clipping row"
  grep -q 'ds_config.json: prescale_gradients: not applied here' "$log" || fail "the ignored keys were not listed"
  local manifest=snapshot-step4-solution.pt
  [ -f "$manifest.g3.rank0-of-2" ] && [ -f "$manifest.g3.rank1-of-2" ] || { ls -l; fail "not every rank wrote its shard"; }
  [ "$(find . -maxdepth 1 -name "$manifest.g*" | wc -l)" -eq 2 ] || { ls -l; fail "earlier generations were left behind"; }
  python3 - "$manifest" "$stage" <<'PY' || fail "the manifest does not describe this run"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["version"] == 2 and m["world_size"] == 2 and m["zero_stage"] == int(sys.argv[2]), m
assert m["program"] == {"writer": "step4_sharded (solution)", "dataset": "synthetic"}, m["program"]
assert [s["file"] for s in m["shards"]] == [sys.argv[1] + ".g3.rank%d-of-2" % r for r in (0, 1)], m["shards"]
PY
}

command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
for stage in 1 2; do
  mkdir "torchrun-zero$stage"
cd "torchrun-zero$stage" || exit 1
  run_logged out.log torchrun --standalone --nproc_per_node=2 --no-python "$BIN/solutions/step4_sharded" \
    "${args[@]}" --zero "$stage" || { cat out.log; fail "torchrun --zero $stage exited non-zero"; }
  echo "torchrun --zero $stage: $(check_training_log out.log 2 "[CPU0]")"
  check_shards out.log "$stage"
  cd .. || exit 1
done

command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
mkdir mpirun
cd mpirun || exit 1
MASTER_PORT=$(free_port) run_logged out.log mpirun "${root[@]}" --oversubscribe -x MASTER_PORT -np 2 \
  "$BIN/solutions/step4_sharded" "${args[@]}" || { cat out.log; fail "mpirun run exited non-zero"; }
echo "mpirun (the config's stage): $(check_training_log out.log 2 "[CPU0]")"
check_shards out.log 2
pass "step 4 under torchrun (ZeRO-1, ZeRO-2) and mpirun with Puhti's ds_config.json"
