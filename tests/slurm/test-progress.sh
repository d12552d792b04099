#!/bin/bash
# defines: test-progress.sh — scripts/check-step and scripts/progress on a workshop day, on the local
#          Slurm. LEARNERS (default 3) non-root Unix users, made for the test, each with a home
#          holding a copy of the project (scripts, clusters, step folders) and a build output in
#          which some exercises are done (the solution's program in the exercise's place) and the
#          others as shipped, submit at the same moment one job each onto two nodes their jobs share.
#          Each job checks steps 1, 2 and 3 (scripts/check-step N --no-build, 2 CPU ranks): step 1
#          (its workers on the batch node), step 2 (torchrun), step 3 (srun, one task per node), all
#          writing to one progress folder that the instructor (root) made with mkdir -m 1777.
# Checks: each check's exit code and verdict (DONE for a done exercise, NOT DONE naming TODO(stepN)
# for one as shipped); each learner's progress file is theirs and holds their three lines, whole;
# `scripts/progress` shows the right table (one row per learner, sorted; the latest result of
# each step; the count of who is done).
set -euo pipefail
source "$(dirname "$0")/lib.sh"   # (set -e first: a missing lib.sh must stop the test)
require_slurm
require_programs step1_multigpu_fork step2_env_launch step3_multinode_slurm solutions/step1_multigpu_fork \
                 solutions/step2_env_launch solutions/step3_multinode_slurm
require_torchrun
for tool in useradd userdel runuser readelf python3; do command -v "$tool" >/dev/null || fail "$tool not found"; done
learners=${DDPW_WORKSHOP_LEARNERS:-3}
prefix=${DDPW_WORKSHOP_USER_PREFIX:-ddpwp}
job_bound=${DDPW_PROGRESS_JOB_BOUND:-420}   # seconds from submission to the end of a job
started=$SECONDS

export DDPW_CLUSTER_GPUS=32 DDPW_CLUSTER_USERS=1
DDPW_CLUSTER_SHARE=$(torch_share "$DDPW_BIN/solutions/step2_env_launch")
export DDPW_CLUSTER_SHARE
start_cluster netns 2
chmod 0711 "$TEST_DIR"
mkdir -m 0711 "$TEST_DIR/home"
progress=$TEST_DIR/progress
mkdir -m 1777 "$progress"   # the instructor's shared folder

# Learner i has done the steps in done_steps[i]; the others are as shipped.
done_steps=("1 3" "1" "")
steps=(1_multigpu_fork 2_env_launch 3_multinode_slurm)
users=()
for i in $(seq "$learners"); do
  user=$prefix$i home=$TEST_DIR/home/$prefix$i project=$TEST_DIR/home/$prefix$i/ddp-workshop
  add_test_user "$user" "$home"
  users+=("$user")
  mkdir -p "$project/scripts" "$project/clusters/puhti" "$project/build/bin/solutions"
  cp "$DDPW_ROOT/scripts/check-step" "$DDPW_ROOT/scripts/progress" "$project/scripts/"
  cp "$DDPW_ROOT/clusters/puhti/ds_config.json" "$project/clusters/puhti/"
  for dir in "$DDPW_ROOT"/step*_*/; do
    mkdir -p "$project/$(basename "$dir")"; cp "$dir/main.cpp" "$project/$(basename "$dir")/"
  done
  mkdir -p "$project/solutions"
  for s in "${steps[@]}"; do
    name=step$s
    mkdir -p "$project/solutions/$name"; cp "$DDPW_ROOT/solutions/$name/main.cpp" "$project/solutions/$name/"
    cp "$DDPW_BIN/solutions/$name" "$project/build/bin/solutions/$name"
    if [[ " ${done_steps[$((i - 1))]:-} " == *" ${s%%_*} "* ]]; then
      cp "$DDPW_BIN/solutions/$name" "$project/build/bin/$name"   # done: the answer's program
    else
      cp "$DDPW_BIN/$name" "$project/build/bin/$name"             # as shipped
    fi
  done
  chown -R "$user:$user" "$home"
done
note "$learners learners: ${users[*]}; done steps: $(printf '[%s] ' "${done_steps[@]:0:$learners}")"

# One job per learner: the three checks one after another, each one's exit code in the log.
cat > "$TEST_DIR/checks.sbatch" <<'EOF'
#!/bin/bash
#SBATCH --job-name=ddpw-check-steps --nodes=2 --ntasks=2 --ntasks-per-node=1 --output=checks.%j.out
set -uo pipefail
cd "$HOME/ddp-workshop"
for n in 1 2 3; do
  scripts/check-step "$n" --no-build
  echo "check-step $n exit code $?"
done
EOF
chmod 0644 "$TEST_DIR/checks.sbatch"
pids=()
for user in "${users[@]}"; do
  runuser -u "$user" -- env -i HOME="$TEST_DIR/home/$user" USER="$user" LOGNAME="$user" \
    PATH="$DDPW_TEST_TORCH_BIN:/usr/local/bin:/usr/bin:/bin" SLURM_CONF="$SLURM_CONF" DDPW_PROGRESS_DIR="$progress" \
    bash -c "cd ~ && sbatch --parsable --oversubscribe --partition=debug '$TEST_DIR/checks.sbatch'" \
    > "$TEST_DIR/submitted.$user" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
declare -A job_of
for user in "${users[@]}"; do
  id=$(cat "$TEST_DIR/submitted.$user")
  [[ $id =~ ^[0-9]+$ ]] || fail "$user could not submit: $id"
  job_of[$user]=$id
done
note "submitted: $(for u in "${users[@]}"; do printf '%s=%s ' "$u" "${job_of[$u]}"; done)"

# Wait for all (bounded).
submitted=$SECONDS
for user in "${users[@]}"; do
  JOB_ID=${job_of[$user]}
  while :; do
    state=$(job_field JobState)
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
    if [ $((SECONDS - submitted)) -ge "$job_bound" ]; then
      JOB_LOG=$(job_field StdOut); show_log
      fail "job $JOB_ID ($user) still $state after $job_bound s"
    fi
    sleep 1
  done
done
note "all ${#users[@]} jobs ended within $((SECONDS - submitted)) s of their submission"

# Each check's verdict, as the learner's log shows it.
for i in $(seq "$learners"); do
  user=${users[$((i - 1))]}
  JOB_ID=${job_of[$user]} JOB_LOG=$(job_field StdOut) JOB_STATE=$(job_field JobState) JOB_EXIT=$(job_field ExitCode)
  expect_success   # the batch script runs the three checks whatever each one says
  for s in "${steps[@]}"; do
    n=${s%%_*}
    if [[ " ${done_steps[$((i - 1))]:-} " == *" $n "* ]]; then
      expect_lines 1 "^check-step $n exit code 0\$"
      expect_lines 1 "^step $n: DONE \(2 ranks, equal weights, checksum [0-9.]+ = the solution's\)\$"
    else
      expect_lines 1 "^check-step $n exit code 1\$"
      expect_lines 1 "^step $n: NOT DONE: .*TODO\(step$n\)"
    fi
  done
  # Step 3 ran under srun on both nodes, as in a job it should.
  expect_lines 1 '^check-step: \$ srun --overlap --ntasks=2'
  echo "   $user (job ${job_of[$user]}): $(grep -E '^step [0-9]: ' "$JOB_LOG" | cut -c1-60 | paste -sd'|' -)"
done

# The progress folder: one file per learner, owned by them, three whole lines each.
for user in "${users[@]}"; do
  file=$progress/$user.tsv
  [ -f "$file" ] || fail "no progress file for $user"
  [ "$(stat -c %U "$file")" = "$user" ] || fail "$file is not owned by $user"
  [ "$(wc -l < "$file")" = 3 ] || { cat "$file"; fail "$file: expected 3 lines (steps 1-3)"; }
  awk -F'\t' -v u="$user" 'NF != 5 || $2 != u || $1 !~ /^[0-9-]+T[0-9:]+Z$/ { bad = 1 } END { exit bad }' "$file" ||
    { cat "$file"; fail "$file: a line is not time, user, step, result, detail"; }
done

# The instructor's table.
"$DDPW_ROOT/scripts/progress" "$progress" > "$TEST_DIR/table.txt"
cat "$TEST_DIR/table.txt"
python3 - "$TEST_DIR/table.txt" "$learners" "${done_steps[@]:0:$learners}" <<'PY' || fail "the table is wrong"
import sys
table, n, done = open(sys.argv[1]).read().splitlines(), int(sys.argv[2]), sys.argv[3:]
users = [row.split(" | ")[0].strip() for row in table[2:2 + n]]
assert users == sorted(users) and len(users) == n, f"rows not one per learner, sorted: {users}"
assert table[0].split(" | ")[1:4] == ["step 1", "step 2", "step 3"] or \
    [c.strip() for c in table[0].split(" | ")[1:4]] == ["step 1", "step 2", "step 3"], table[0]
for row, steps in zip(table[2:2 + n], done):
    cells = [c.strip() for c in row.split(" | ")]
    for step in (1, 2, 3):
        want = "DONE" if str(step) in steps.split() else "TODO"
        assert cells[step].startswith(want + " "), f"{cells[0]} step {step}: '{cells[step]}', expected {want}"
counts = [sum(str(s) in d.split() for d in done) for s in (1, 2, 3)]
want = f"{n} learners; done: step 1: {counts[0]}, step 2: {counts[1]}, step 3: {counts[2]}"
assert want in table, f"no line '{want}'"
print("table ok:", want)
PY
echo "PASS: $learners learners checked steps 1-3 in jobs on 2 shared nodes, into one progress folder; the table is right; whole test $((SECONDS - started)) s"
