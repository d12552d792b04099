#!/usr/bin/env bash
# Step 5: the trainer's snapshots under a stop signal, for both kinds. --strategy zero2 under torchrun
# (a sharded snapshot: every rank its shard): SIGTERM to rank 1 only. --strategy ddp started by the
# trainer itself (--gpus 2, no launcher; a plain snapshot, rank 0 writes it): SIGUSR1 to the parent,
# as sbatch --signal=B:USR1 would. Each time both ranks stop at one step mid-epoch and exit 75, and
# the resumed run ends with the uninterrupted run's weights, bit for bit.
source "$(dirname "$0")/../faults/lib.sh"
command -v torchrun >/dev/null || fail "torchrun not found"
STEP5=$BIN/solutions/step5_trainer
args=(--epochs 8 --batch-size 8 --threads 1 --rendezvous-timeout 30 --collective-timeout 10)  # 128 steps per epoch

# stop_resume NAME SIGNAL TARGET COMMAND...: TARGET is "parent" (the command's own process) or a
# torchrun rank. Uninterrupted run, then a run stopped by SIGNAL after 2 epochs, then the resume.
stop_resume() {
  local name=$1 sig=$2 target=$3; shift 3
  mkdir "$name" && cd "$name" || fail "cannot enter $name"
  mkdir ref && (cd ref && run_logged out.log "$@") || { cat ref/out.log; fail "$name: uninterrupted run failed"; }
  local expected; expected=$(final_checksum ref/out.log)
  [ -n "$expected" ] || fail "$name: no checksum in the uninterrupted run"
  "$@" >part1.log 2>&1 &
  local parent=$!; STARTED_PIDS+=("$parent")
  wait_for_line part1.log '\(2 epochs run, step 0\)' 60
  sleep 0.1  # into the epoch (~3 ms a step)
  local victim=$parent
  [ "$target" = parent ] || victim=$(torchrun_worker "$parent" "$target")
  [ -n "$victim" ] || fail "$name: no process for $target"
  kill -s "$sig" "$victim"
  wait_bounded "$parent" 60
  local stops; stops=$(grep -oE '^\[CPU[01]\] Stopping at epoch [0-9]+, step [0-9]+' part1.log | sed 's/^\[CPU[01]\] //' | sort | uniq -c)
  [ "$(echo "$stops" | wc -l)" -eq 1 ] && [ "$(echo "$stops" | awk '{print $1}')" -eq 2 ] ||
    { cat part1.log; fail "$name: the ranks did not stop at one step: $stops"; }
  local stop; stop=$(echo "$stops" | sed -E 's/^ *2 Stopping //')
  [ "${stop##*step }" -gt 0 ] || fail "$name: stopped at an epoch boundary, not mid-epoch"
  if [ "$target" = parent ]; then
    [ "$RC" -eq 75 ] || { cat part1.log; fail "$name: exit $RC, expected 75"; }
  else
    [ "$(grep -cE 'exitcode *: 75 ' part1.log)" -eq 2 ] || { cat part1.log; fail "$name: not both workers exited 75"; }
  fi
  run_logged part2.log "$@" || { cat part2.log; fail "$name: the resumed run failed"; }
  grep -q "Resuming training from snapshot snapshot-step5-solution.pt $stop" part2.log || { cat part2.log; fail "$name: did not resume $stop"; }
  local got; got=$(final_checksum part2.log)
  [ "$got" = "$expected" ] || fail "$name: stopped and resumed: checksum $got, uninterrupted $expected"
  echo "ok   $name: SIG$sig to $target: both ranks stopped $stop, exit 75; resumed run equal ($got)"
  cd ..
}

stop_resume zero2_torchrun TERM 1 torchrun --standalone --nproc_per_node=2 --no-python "$STEP5" --strategy zero2 "${args[@]}"
stop_resume ddp_spawn USR1 parent "$STEP5" --gpus 2 --strategy ddp --master-port "$(free_port)" "${args[@]}"
pass "step 5: a stopped zero2 (sharded) and ddp (plain) run resume to the uninterrupted weights"
