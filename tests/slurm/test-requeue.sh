#!/bin/bash
# defines: test-requeue.sh — the time-limit path, for real, with each way the sites launch: the
#          batch shell gets SIGUSR1 mid-training (what `#SBATCH --signal=B:USR1@120` does, sent
#          here at once with scancel), passes the stop on, the ranks write one snapshot and exit
#          75, the script requeues the job, and the requeued run resumes at the very step where
#          it stopped and finishes. Launchers: srun (Della step 3), srun torchrun (HiPerGator
#          step 2, c10d on two nodes) and mpirun (SuperCloud step 2).
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step2_env_launch solutions/step3_multinode_slurm
require_torchrun
command -v mpirun >/dev/null || fail "mpirun not found: apt-get install openmpi-bin"
start_cluster netns 2
epochs=${DDPW_REQUEUE_EPOCHS:-20}

wait_for_log() {  # wait_for_log PATTERN SECONDS
  local deadline=$((SECONDS + $2))
  JOB_LOG=$(job_field StdOut)
  until grep -Eq -- "$1" "$JOB_LOG" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || { scancel "$JOB_ID"; show_log; fail "job $JOB_ID: no '$1' in the log within $2 s"; }
    [ -n "$(job_field JobState)" ] || fail "job $JOB_ID vanished"
    sleep 0.2
  done
}

# stop_and_resume SITE SCRIPT RANKS
stop_and_resume() {
  local site=$1 script=$2 ranks=$3
  # Saves only when stopped and at the end, so each "saved" line below is one of those two.
  SUBMIT_NO_WAIT=1 submit "$site" "$script" "$epochs" 1000
  wait_for_log "Epoch 1 \| Batchsize" "$job_timeout"
  scancel --signal=USR1 --batch "$JOB_ID"
  wait_job
  note "$site/$script: job $JOB_ID stopped, requeued and finished: $JOB_STATE (exit $JOB_EXIT) in $JOB_SECONDS s"
  expect_success
  [ "$(job_field Restarts)" = 1 ] || { show_log; fail "job $JOB_ID: Restarts=$(job_field Restarts), expected 1"; }
  expect_lines 1 "requeueing job $JOB_ID"
  expect_lines 1 "job $JOB_ID .* restart 1 "
  expect_lines 2 "Training snapshot saved"
  expect_lines 1 "Epoch $((epochs - 1)) \| train loss"
  expect_one_snapshot solution
  # Every rank stopped at the same step, and every rank resumed exactly there.
  local stop
  stop=$(grep -Eo "Stopping at epoch [0-9]+, step [0-9]+" "$JOB_LOG" | sort -u)
  [ "$(wc -l <<< "$stop")" = 1 ] || { show_log; fail "job $JOB_ID: ranks stopped at different steps: $stop"; }
  expect_lines "$ranks" "$stop \\((SIG[A-Z0-9]+|a signal to another rank)\\)"
  expect_lines "$ranks" "Resuming training from snapshot .* at ${stop#Stopping at }$"
  final_losses+=("$(grep -Eo "Epoch $((epochs - 1)) \| train loss [0-9.]+" "$JOB_LOG")")
}

# The reference: the same training, never interrupted.
submit della step3.sbatch "$epochs" 1000
expect_success
final_losses=("$(grep -Eo "Epoch $((epochs - 1)) \| train loss [0-9.]+" "$JOB_LOG")")

stop_and_resume della step3.sbatch 4
stop_and_resume hipergator step2.sbatch 4
stop_and_resume supercloud step2.sbatch 4
# Resuming mid-epoch must not change the result: every run ends exactly where the uninterrupted one did.
[ "$(printf '%s\n' "${final_losses[@]}" | sort -u | wc -l)" = 1 ] ||
  fail "stopped-and-resumed runs end differently from the uninterrupted one: $(printf '[%s] ' "${final_losses[@]}")"
note "all four runs end with: ${final_losses[0]}"
echo "PASS: stop at the time limit, snapshot, requeue and resume work with srun, torchrun and mpirun"
