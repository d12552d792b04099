#!/usr/bin/env bash
# Step 5: one program under every way of starting it, same result. Lightning's `--devices 2` (= --gpus) alone (no
# launcher, CPU) starts 2 workers itself, as step 1 does; under mpirun (OpenMPI's variables) and
# under torchrun the trainer reads the ranks with the library's resolver. All three end with the
# same weights (same seed, 2 ranks, --strategy auto = ddp with 2 ranks).
source "$(dirname "$0")/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs openmpi-bin)"
STEP5=$BIN/solutions/step5_trainer
args=(--epochs 3 --seed 11 --batch-size 16 --threads 1)
final_checksum() { grep -m1 'final weights checksum' "$1" | awk '{print $NF}'; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)

mkdir spawn; (cd spawn && run_logged out.log "$STEP5" --devices 2 "${args[@]}") || { cat spawn/out.log; fail "--devices 2 failed"; }
grep -qE '^launcher +\| options' spawn/out.log || { cat spawn/out.log; fail "--gpus 2: the workers were not started by the trainer"; }
grep -qE '^world size +\| 2' spawn/out.log || fail "--gpus 2: world size is not 2"
grep -qE '^strategy +\| ddp' spawn/out.log || fail "--gpus 2: --strategy auto did not choose ddp"
(cd spawn && check_training_log out.log 2 "[CPU0]")
spawned=$(final_checksum spawn/out.log)

mkdir mpi; (cd mpi && MASTER_PORT=$(free_port) run_logged out.log mpirun "${root[@]}" --oversubscribe -np 2 "$STEP5" "${args[@]}") \
  || { cat mpi/out.log; fail "mpirun failed"; }
grep -qE '^launcher +\| openmpi' mpi/out.log || { cat mpi/out.log; fail "the trainer did not see mpirun"; }
(cd mpi && check_training_log out.log 2 "[CPU0]")

mkdir torchrun; (cd torchrun && run_logged out.log torchrun --standalone --nproc_per_node=2 --no-python "$STEP5" --gpus 2 "${args[@]}") \
  || { cat torchrun/out.log; fail "torchrun failed"; }
(cd torchrun && check_training_log out.log 2 "[CPU0]")

for launcher in mpi torchrun; do
  got=$(final_checksum $launcher/out.log)
  [ "$got" = "$spawned" ] || fail "$launcher: checksum $got, --gpus 2 without a launcher: $spawned"
done
pass "step 5: --devices 2 alone starts 2 workers; mpirun and torchrun end with the same weights ($spawned)"
