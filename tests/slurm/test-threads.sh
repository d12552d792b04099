#!/bin/bash
# defines: test-threads.sh — threads per rank under srun when a job asks --cpus-per-task. Slurm
#          22.05 to 23.02 (Debian 12's is 22.05) does not pass the job's --cpus-per-task on to srun,
#          which then binds each task to one CPU. On a one-node cluster whose node has this machine's
#          CPUs and binds tasks to cores, as a site's does (cluster-up.sh, DDPW_CLUSTER_BIND=1):
#   - a plain srun in a job with --cpus-per-task=2, no script of ours: its task's affinity mask
#     (1 CPU where this Slurm has the behaviour, 2 where it does not: both are reported);
#   - the sites' scripts, whose clusters/common.sh exports SRUN_CPUS_PER_TASK: step 3 under srun
#     (Della's) and step 2 under srun torchrun with one worker (Puhti's) run 2 threads per rank,
#     from 2 CPUs in the rank's affinity mask.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs solutions/step2_env_launch solutions/step3_multinode_slurm
require_torchrun
[ "$(nproc --all)" -ge 2 ] || skip "needs 2 CPUs (a task bound to 2 of them)"
command -v taskset >/dev/null || skip "no taskset (util-linux)"
DDPW_CLUSTER_BIND=1 start_cluster single

# The control: srun with nothing but the job's --cpus-per-task=2.
RUN_DIR=$TEST_DIR/runs/plain-srun
mkdir -p "$RUN_DIR"
# shellcheck disable=SC2016  # expanded in the job
JOB_ID=$(cd "$RUN_DIR" && sbatch --parsable --partition=debug --ntasks=1 --cpus-per-task=2 --output=plain.out \
  --wrap 'srun bash -c "echo task mask: \$(taskset -cp \$\$ | sed \"s/.*: //\")"') || fail "sbatch refused the plain srun job"
JOB_STARTED=$SECONDS
wait_job
expect_success
plain=$(sed -n 's/^task mask: //p' "$JOB_LOG")
[ -n "$plain" ] || { show_log; fail "the plain srun job printed no affinity mask"; }
if [ "$plain" = 0 ] || [[ $plain =~ ^[0-9]+$ ]]; then
  note "this Slurm ($(sbatch --version)): a plain srun binds the task to 1 CPU ($plain) although the job asked --cpus-per-task=2"
else
  note "this Slurm ($(sbatch --version)): a plain srun passes --cpus-per-task=2 on (mask $plain)"
fi

# The sites' scripts: SRUN_CPUS_PER_TASK from common.sh.
one_task="--nodes=1 --ntasks-per-node=1 --cpus-per-task=2 --gres=gpu:1 --mem=1G"
SBATCH_OPTS=$one_task submit della step3.sbatch 2 1
expect_success
expect_lines 1 "^threads per rank +\| 2 \(2 CPUs in the affinity mask\) *$"
SBATCH_OPTS="--cpus-per-task=2 --gres=gpu:1 --mem=1G" submit puhti step2.sbatch 2 1
expect_success
expect_lines 1 "^threads per rank +\| 2 \(2 CPUs in the affinity mask\) *$"
echo "PASS: under srun a rank gets the job's --cpus-per-task (2 threads from 2 CPUs; plain srun: $plain)"
