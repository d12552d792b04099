#!/bin/bash
# defines: test-workshop.sh — a workshop day on the local Slurm. LEARNERS (default 4) non-root Unix
#          users, made for the test, each with a home holding a copy of the project's scripts and
#          build output, submit at the same moment onto two nodes that their jobs share (sbatch
#          --oversubscribe on an OverSubscribe partition; 32 GPUs per node for Slurm's bookkeeping):
#            step 1  HiPerGator's step1.sbatch (the program starts its workers, on one node),
#            step 2  HiPerGator's step2.sbatch (srun torchrun, c10d rendezvous on the first node),
#            step 3  Della's step3.sbatch (srun, one task per rank, two nodes),
#          first with the solutions, then, all again at once, with their own exercise binaries
#          (DDPW_PROGRAMS=$PWD/build/bin). The modules are the sites' real env.sh with a stand-in
#          `module` (fake-module.sh); the programs train on the CPU (DDPW_EXTRA_ARGS=--device cpu).
# Checks: every job ends with exit 0, or (an unfinished exercise) fails with a message naming its
# TODO; no job joins another's rendezvous (its world size, one checksum per rank and all equal, a
# rendezvous host:port no other job of the wave used, no "claim rank"/"already in use"); no job
# resumes a snapshot; no learner's snapshot or metrics file is changed by a later job (sha256 and
# mtime) or written by another user; each job ends within JOB_BOUND seconds of its submission.
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
programs=(step1_multigpu_fork step2_env_launch step3_multinode_slurm solutions/step1_multigpu_fork
          solutions/step2_env_launch solutions/step3_multinode_slurm)
require_programs "${programs[@]}"
require_torchrun
for tool in useradd userdel runuser readelf sha256sum; do command -v "$tool" >/dev/null || fail "$tool not found"; done
learners=${DDPW_WORKSHOP_LEARNERS:-4}
prefix=${DDPW_WORKSHOP_USER_PREFIX:-ddpwl}
job_bound=${DDPW_WORKSHOP_JOB_BOUND:-200}   # seconds from submission to the end of a job
started=$SECONDS

# Inside the nodes the learners' jobs need the torch environment (torchrun, LibTorch): lib.sh's torch_share.
export DDPW_CLUSTER_GPUS=32 DDPW_CLUSTER_USERS=1
DDPW_CLUSTER_SHARE=$(torch_share "$DDPW_BIN/solutions/step2_env_launch")
export DDPW_CLUSTER_SHARE
start_cluster netns 2
chmod 0711 "$TEST_DIR"   # the learners reach their homes and the cluster's config, nothing else
mkdir -m 0711 "$TEST_DIR/home"

# ---- the learners: a home each, with the project's scripts and build output copied into it
users=()
for i in $(seq "$learners"); do
  user=$prefix$i home=$TEST_DIR/home/$prefix$i
  add_test_user "$user" "$home"
  users+=("$user")
  mkdir -p "$home/ddp-workshop/build/bin/solutions" "$home/ddp-workshop/metrics"
  cp -r "$DDPW_ROOT/clusters" "$home/ddp-workshop/"
  for p in "${programs[@]}"; do cp "$DDPW_BIN/$p" "$home/ddp-workshop/build/bin/$p"; done
  cp "$slurm_tests/fake-module.sh" "$home/"
  chown -R "$user:$user" "$home"
done
note "$learners learners with their own homes: ${users[*]}"

# as_learner USER COMMAND: a login shell of USER's own (no root environment), in the project folder.
as_learner() {
  runuser -u "$1" -- env -i HOME="$TEST_DIR/home/$1" USER="$1" LOGNAME="$1" PATH=/usr/local/bin:/usr/bin:/bin \
    SLURM_CONF="$SLURM_CONF" DDPW_TEST_TORCH_BIN="$DDPW_TEST_TORCH_BIN" DDPW_EXTRA_ARGS="--device cpu" \
    DDPW_VENV="${DDPW_TEST_TORCH_BIN%/bin}" \
    bash -c "source ~/fake-module.sh && cd ~/ddp-workshop && $2"
}

# The three jobs of a learner: site, script, expected world size (solutions).
jobs_of_a_learner=("hipergator step1.sbatch 2" "hipergator step2.sbatch 4" "della step3.sbatch 4")
declare -A job_user job_script job_kind job_end job_submitted
# wave KIND: every learner submits their three jobs at once; waits until all have ended.
wave() {
  local kind=$1 user entry site script own="" submitted=$SECONDS pids=()
  # shellcheck disable=SC2016  # $PWD is the learner's, expanded in their shell
  [ "$kind" = exercise ] && own='DDPW_PROGRAMS=$PWD/build/bin '
  for user in "${users[@]}"; do
    local commands=""
    for entry in "${jobs_of_a_learner[@]}"; do
      read -r site script _ <<< "$entry"
      commands+="${own}sbatch --parsable --oversubscribe $(site_options "$site") clusters/$site/$script 2 1"
      commands+=" --metrics metrics/$kind-${script%.sbatch}.csv | sed 's|\$| $site/$script|';"
    done
    as_learner "$user" "$commands" > "$TEST_DIR/submitted.$kind.$user" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"   # (not a bare wait: the test's watchdog runs in the background too)
  local id rest answers
  WAVE_JOBS=()
  for user in "${users[@]}"; do
    answers=$(cat "$TEST_DIR/submitted.$kind.$user")
    while read -r id rest; do
      [[ $id =~ ^[0-9]+$ ]] || { echo "$answers"; fail "$user could not submit: $id $rest"; }
      WAVE_JOBS+=("$id")
      job_user[$id]=$user job_script[$id]=$rest job_kind[$id]=$kind job_submitted[$id]=$submitted
    done <<< "$answers"
  done
  note "$kind wave: ${#WAVE_JOBS[@]} jobs submitted by $learners learners within $((SECONDS - submitted)) s"
  # Wait for all of them (bounded); record when each ended.
  local left=("${WAVE_JOBS[@]}") still state running
  MOST_AT_ONCE=0
  while [ ${#left[@]} -gt 0 ]; do
    still=() running=0
    for id in "${left[@]}"; do
      JOB_ID=$id
      state=$(job_field JobState)
      [ "$state" != RUNNING ] || running=$((running + 1))
      case $state in
        COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) job_end[$id]=$SECONDS ;;
        *) if [ $((SECONDS - submitted)) -ge "$job_bound" ]; then
             JOB_LOG=$(job_field StdOut); show_log
             fail "job $id (${job_user[$id]}: ${job_script[$id]}, $kind) still $state after $job_bound s"
           fi
           still+=("$id") ;;
      esac
    done
    [ "$running" -le "$MOST_AT_ONCE" ] || MOST_AT_ONCE=$running
    left=(${still[@]+"${still[@]}"})
    [ ${#left[@]} -eq 0 ] || sleep 0.5
  done
  note "$kind wave: all ${#WAVE_JOBS[@]} jobs ended within $((SECONDS - submitted)) s of their submission;" \
       "up to $MOST_AT_ONCE ran at once on the 2 nodes"
  # They shared the nodes: at least one job per learner ran at the same time as the others.
  [ "$MOST_AT_ONCE" -ge "$learners" ] ||
    fail "$kind wave: at most $MOST_AT_ONCE jobs ran at once, fewer than the $learners learners: the nodes were not shared"
}

# check_wave: each job of the last wave on its own, then the rendezvous of all of them.
declare -A rendezvous_of
check_wave() {
  local id user script kind state log world sums rdzv first
  for id in "${WAVE_JOBS[@]}"; do
    JOB_ID=$id user=${job_user[$id]} script=${job_script[$id]} kind=${job_kind[$id]}
    JOB_STATE=$(job_field JobState) JOB_EXIT=$(job_field ExitCode) JOB_LOG=$(job_field StdOut)
    log=$JOB_LOG
    local what="job $id ($user: $script, $kind)"
    # Its name says which programs it ran (squeue, sacct): the script's --job-name plus the kind.
    local name want_name
    name=$(job_field JobName)
    want_name=$(sed -n 's/^#SBATCH --job-name=\([^ ]*\).*/\1/p' "$DDPW_ROOT/clusters/$script")-$kind
    [ "$name" = "$want_name" ] || { show_log; fail "$what is called '$name', expected '$want_name'"; }
    [ -f "$log" ] || fail "$what: no log at $log"
    [ "$(stat -c %U "$log")" = "$user" ] || fail "$what: its log is not owned by $user"
    if grep -Eq 'claim rank|already in use|Resuming training' "$log"; then
      show_log; fail "$what met another job's rendezvous or resumed a snapshot"
    fi
    if [ "$kind" = exercise ] && [ "$JOB_STATE" = FAILED ]; then
      # An unfinished exercise: fine, if it says which TODO is missing.
      grep -Eq 'TODO\(step[0-9]\)' "$log" || { show_log; fail "$what failed without naming the TODO it misses"; }
      echo "   $what: FAILED as an unfinished exercise: $(grep -Eo -m1 'complete TODO\(step[0-9]\)[^)]*|TODO\(step[0-9]\)' "$log")"
      continue
    fi
    if [ "$JOB_STATE" != COMPLETED ] || [ "$JOB_EXIT" != 0:0 ]; then show_log; fail "$what: $JOB_STATE, exit $JOB_EXIT"; fi
    world=$(sed -nE 's/^world size +\| +([0-9]+) *$/\1/p' "$log")
    if [ "$kind" = solution ]; then
      local want
      for entry in "${jobs_of_a_learner[@]}"; do
        read -r site name want <<< "$entry"; [ "$site/$name" = "$script" ] && break
      done
      [ "$world" = "$want" ] || { show_log; fail "$what: world size '$world', expected $want"; }
    fi
    sums=$(grep -Eo 'final weights checksum [^ ]+$' "$log" | awk '{print $NF}')
    [ "$(wc -l <<< "$sums")" = "$world" ] || { show_log; fail "$what: $(wc -l <<< "$sums") checksum lines for a world of $world"; }
    [ "$(sort -u <<< "$sums" | wc -l)" = 1 ] || { show_log; fail "$what: its ranks ended with different weights"; }
    rdzv=$(sed -nE 's/^rendezvous +\| +([^ ]+:[0-9]+) *$/\1/p' "$log")
    first=$(scontrol show hostnames "$(job_field NodeList)" | sed -n 1p)
    rdzv=${rdzv/#localhost:/$first:}   # step 1 meets on its own node
    rdzv=${rdzv/#127.0.0.1:/$first:}
    if [[ $rdzv == *:* ]]; then         # (an exercise that trains alone has none)
      [ -z "${rendezvous_of[$rdzv]:-}" ] || fail "$what and job ${rendezvous_of[$rdzv]} used the same rendezvous $rdzv"
      rendezvous_of[$rdzv]=$id
    fi
    echo "   $what: world $world on $(job_field NodeList), rendezvous $rdzv, checksum $(sed -n 1p <<< "$sums"), $((job_end[$id] - job_submitted[$id])) s"
  done
}

# fingerprint: every file in the learners' homes with owner, size, mtime and sha256
fingerprint() {
  local user
  for user in "${users[@]}"; do
    (cd "$TEST_DIR/home/$user" && find ddp-workshop/snapshots ddp-workshop/metrics -type f -printf '%u %s %T@ %p\n' |
       while read -r owner size mtime path; do
         echo "$user $path $owner $size $mtime $(sha256sum < "$path" | cut -c1-16)"
       done) || true
  done | sort
}
# expect_files KIND PATTERN...: each learner has exactly these snapshot files (written by them)
expect_learner_files() {
  local user want got
  for user in "${users[@]}"; do
    got=$(cd "$TEST_DIR/home/$user/ddp-workshop" && find snapshots -type f | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    [ "$got" = "$want" ] || fail "$user's snapshots: '$got', expected '$want'"
  done
  ! fingerprint | awk '$1 != $3' | grep -q . || { fingerprint | awk '$1 != $3'; fail "a learner's file was written by another user"; }
}

wave solution
check_wave
expect_learner_files snapshots/ddpw-hpg-step1.solution.pt snapshots/ddpw-hpg-step2.solution.pt \
                     snapshots/ddpw-della-step3.solution.pt
before=$(fingerprint)
solution_jobs=${#WAVE_JOBS[@]}

wave exercise
check_wave
# The exercises' jobs left every file of the solutions' jobs as it was (no resume, no overwrite).
after=$(fingerprint)
changed=$(comm -23 <(echo "$before") <(echo "$after"))
[ -z "$changed" ] || fail "the exercise wave changed files of the solution wave:
$changed"
exercise_snapshots=$(grep -c '\.exercise\.pt ' <<< "$after" || true)
note "exercise wave wrote $exercise_snapshots snapshots of its own, next to the solutions' (unchanged)"

total=$((solution_jobs + ${#WAVE_JOBS[@]}))
echo "PASS: workshop day: $learners learners, $total jobs on 2 shared nodes, each within $job_bound s; whole test $((SECONDS - started)) s"
