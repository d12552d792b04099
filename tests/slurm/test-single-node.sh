#!/bin/bash
# defines: test-single-node.sh — the one-node scripts on a one-node Slurm cluster in this machine's
#          own namespaces (cluster-up.sh single): Puhti's torchrun --standalone step 2, Della's and
#          Delta's srun step 2, each trained to the end with exactly one snapshot; DDPW_PROGRAMS
#          chooses the programs, and the default snapshot keeps them apart: the learner's exercise
#          (DDPW_PROGRAMS=build/bin) submitted in the folder where the solution ran starts afresh
#          instead of resuming the solution's snapshot, and the tasks of a job array each have their
#          own. Threads per rank under srun -c follow Slurm's CPUs; arguments can come from DDPW_ARGS.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step1_multigpu_fork solutions/step2_env_launch step1_multigpu_fork step2_env_launch
require_torchrun
start_cluster single
node=$(sinfo -h -N -o %N)

for site in puhti della delta; do
  submit "$site" step2.sbatch 2 1
  expect_success; expect_nodes "$node"
  expect_lines 1 "Epoch 1 \| train loss"
  expect_lines 2 "Training snapshot saved"
  expect_one_snapshot solution
done
# DDPW_PROGRAMS points the scripts at other programs (a learner's own build of the steps).
mine=$TEST_DIR/my-programs
mkdir -p "$mine" && ln -sf "$DDPW_BIN/solutions/step2_env_launch" "$mine/step2_env_launch"
DDPW_PROGRAMS=$mine submit della step2.sbatch 2 1
expect_success
expect_lines 1 "^# programs $mine\$"
expect_job_name ddpw-della-step2   # programs of another folder: no kind added
# A log named after the job (%x): renamed, Slurm would point at a log that is not there, so the job
# keeps its name and says why.
SBATCH_OPTS="--output=%x.%j.out" submit della step2.sbatch 2 1
expect_success; expect_job_name ddpw-della-step2
expect_lines 1 "^# note: the job keeps its name ddpw-della-step2: its log is named after it"
expect_lines 1 "Epoch 1 \| train loss"
DDPW_PROGRAMS=$TEST_DIR/no-such-folder submit della step2.sbatch 2 1
expect_failure "no-such-folder not found: build first, or set DDPW_PROGRAMS"

# The solution, then the learner's exercise, in one folder (main: the exercise resumed the
# solution's snapshot, trained nothing and printed the solution's checksum).
SUBMIT_DIR=$TEST_DIR/runs/learner submit della step1.sbatch 2 1
expect_success; expect_one_snapshot solution; expect_job_name ddpw-della-step1-solution
solution_sum=$(sha256sum "$RUN_DIR/snapshots/ddpw-della-step1.solution.pt")
SUBMIT_DIR=$TEST_DIR/runs/learner DDPW_PROGRAMS=$DDPW_BIN submit della step1.sbatch 2 1
expect_success   # the step 1 exercise trains alone (its TODOs start the workers)
expect_job_name ddpw-della-step1-exercise   # squeue and sacct tell it from the solution's job
expect_lines 0 "Resuming training"
expect_lines 1 "^# snapshot $RUN_DIR/snapshots/ddpw-della-step1.exercise.pt\$"
[ -s "$RUN_DIR/snapshots/ddpw-della-step1.exercise.pt" ] || fail "the exercise wrote no snapshot of its own"
[ "$(sha256sum "$RUN_DIR/snapshots/ddpw-della-step1.solution.pt")" = "$solution_sum" ] ||
  fail "the exercise's job changed the solution's snapshot"
# An unfinished exercise under a launcher stops at once, naming its TODO (the step 2 exercise is
# still step 1's program: it refuses to start workers of its own in each of srun's tasks).
SUBMIT_DIR=$TEST_DIR/runs/learner DDPW_PROGRAMS=$DDPW_BIN submit della step2.sbatch 2 1
expect_failure "TODO\(step2\)"

# A job array: each task its own snapshot (one job name; SLURM_ARRAY_TASK_ID tells them apart).
SBATCH_OPTS="--array=0-1 --ntasks-per-node=1" SUBMIT_NO_WAIT=1 submit della step2.sbatch 2 1
array=$JOB_ID
for task in 0 1; do JOB_ID=${array}_$task; wait_job; expect_success; done
files=$(cd "$RUN_DIR" && find snapshots -type f | sort | tr '\n' ' ')
[ "$files" = "snapshots/ddpw-della-step2.solution.0.pt snapshots/ddpw-della-step2.solution.1.pt " ] ||
  fail "array tasks' snapshots: '$files', expected one per task"

# srun -c 2 and step 1's two workers: the task's CPUs are shared by its workers (main: each took
# all of SLURM_CPUS_PER_TASK). Arguments from DDPW_ARGS (for LLsub, which may not pass them on).
SBATCH_OPTS=--cpus-per-task=2 DDPW_ARGS="2 1" submit della step1.sbatch
expect_success
expect_lines 1 "^# arguments 2 1 \(DDPW_ARGS\)$"
expect_lines 1 "Epoch 1 \| train loss"
expect_lines 1 "^threads per rank +\| 1 \((SLURM_CPUS_PER_TASK=2|[0-9]+ CPUs in the affinity mask) / 2 workers\)"
echo "PASS: one-node scripts ran on a single-node Slurm cluster"
