#!/usr/bin/env bash
# Every step page's Run block as a learner runs it: the first ```bash block under "## Run" of
# step0_*/README.md ... step5_*/README.md, each run by bash command by command (set -e: the first
# command that fails ends the page, named with its exit code), each page in a fresh folder of its
# own (a copy of the project's tracked files, no build outputs, no snapshots, nothing an earlier
# page made: a learner may start at any step) with the solution's code in place: each step's
# program in build/bin is the solution's, already built (copied, not rebuilt). A page whose commands fail in sequence (a snapshot the next command refuses, a flag a
# program does not take, a file that is not there) fails the test.
#
# What the test changes in a block, and nothing else (each substitution is a sed below):
#  - `cmake --build build --target T` checks that build/bin/T is there instead of building it;
#  - `scripts/check-step N` gets --no-build (it runs the programs in place, as in a job) and its
#    documented `--epochs 3` (exercise and solution both train 3 epochs; step 6's GPT, 1 epoch);
#  - fewer epochs in the pages' own runs too: positional `50 10` and `20 10` become `3 1`,
#    `--epochs 50` becomes `--epochs 3`;
#  - step 3's fixed job id 4242 (port 20000 + id % 20000) and step 2's MASTER_PORT=29931 become
#    free ports, as the pages say to do on a shared machine;
#  - as root, OpenMPI's OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) and oversubscription are set in the
#    environment (step 2's page: "as root: add --allow-run-as-root --oversubscribe").
# DDPW_PAGE_RUNS_STEPS="2 5" runs only those pages (a quicker look while editing one).
source "$(dirname "$0")/lib.sh"
ROOT=${DDPW_ROOT:?DDPW_ROOT must point at the project}
command -v torchrun >/dev/null || fail "torchrun not found (scripts/setup.sh installs it)"
command -v mpirun >/dev/null || fail "mpirun not found (scripts/setup.sh installs OpenMPI)"

# ---- a fresh folder: tracked and new files, not the build outputs; the solutions' programs
# (the project's files are packed once; each page unpacks them into its own folder)
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$ROOT" ls-files -z --cached --others --exclude-standard | tar -C "$ROOT" --null -T - -cf "$WORK/project.tar"
else
  tar -C "$ROOT" --exclude='./build*' --exclude=./out --exclude='*.pt' -cf "$WORK/project.tar" .
fi
fresh_folder() {  # FOLDER STEP: the project, and step STEP's programs where a learner's build puts them
  local tree=$1 step=$2
  mkdir -p "$tree/build/bin/solutions"
  tar -C "$tree" -xf "$WORK/project.tar"
  if [ -x "$BIN/solutions/$step" ]; then
    cp "$BIN/solutions/$step" "$tree/build/bin/solutions/"
    cp "$BIN/solutions/$step" "$tree/build/bin/"  # the learner's exercise, done
  else
    cp "$BIN/$step" "$tree/build/bin/"  # step 0: the starting program, no exercise
  fi
}

# ---- one page's Run block, with the substitutions above
run_block() {  # README -> the commands on stdout
  awk '/^## Run/ { run = 1; next } /^## / { run = 0 } run && /^```bash/ { inside = 1; next }
       inside && /^```/ { exit } inside { print }' "$1"
}
# A port nothing listens on in 20000-39999, the range of step 3's 20000 + job id % 20000.
job_port=$(python3 -c '
import random, socket
for port in random.sample(range(20000, 40000), 20000):
    with socket.socket() as s:
        try:
            s.bind(("", port)); print(port); break
        except OSError:
            pass')
job_id=$((100000 + job_port - 20000))
substitute() {
  sed -E -e 's#^cmake --build build --target ([A-Za-z0-9_]+)(.*)$#test -x build/bin/\1  \2#' \
    -e "s#scripts/check-step ([0-9a-z]+)#scripts/check-step \\1 --no-build --epochs $check_epochs#" \
    -e 's#(build/bin/[a-z0-9_]+) (50|20) 10( |$)#\1 3 1\3#' \
    -e 's#--epochs 50( |$)#--epochs 3\1#' \
    -e "s#SLURM_JOB_ID=4242#SLURM_JOB_ID=$job_id#" \
    -e "s#MASTER_PORT=29931#MASTER_PORT=$(free_port)#"
}
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
unset DDPW_BUILD DDPW_BIN DDPW_ROOT   # the pages' commands find everything from the folder they run in

total=$SECONDS
pages=0
for page in "$ROOT"/step*_*/README.md; do
  step=$(basename "$(dirname "$page")")
  short=${step%%_*}
  if [ -n "${DDPW_PAGE_RUNS_STEPS:-}" ] && ! grep -qw "${short#step}" <<<"$DDPW_PAGE_RUNS_STEPS"; then continue; fi
  block=$(run_block "$page")
  check_epochs=3; [ "$short" != step6 ] || check_epochs=1  # the GPT's epoch costs more than the others' 3
  [ -n "$block" ] || fail "$step/README.md has no \`\`\`bash block under ## Run"
  {
    echo 'set -eE -o pipefail'
    echo "trap 'echo \"page_runs: $step: this command failed (exit \$?): \$BASH_COMMAND\" >&2' ERR"
    echo "PS4='+ [\$SECONDS s] '; set -x   # each command in the log, with the seconds since the page began"
    substitute <<<"$block"
  } >"$WORK/$step.sh"
  start=$SECONDS
  tree=$WORK/$step
  fresh_folder "$tree" "$step"
  rc=0
  (cd "$tree" && DDPW_TEST_TIMEOUT=300 run_logged "$WORK/$step.log" bash "$WORK/$step.sh") || rc=$?
  if [ "$rc" != 0 ]; then
    echo "---- $step/README.md's Run block as run:"; cat "$WORK/$step.sh"
    echo "---- its output (last 40 lines):"; tail -n 40 "$WORK/$step.log"
    fail "$step/README.md: the Run block failed (exit $rc): $(grep -m1 '^page_runs:' "$WORK/$step.log" || echo 'timed out?')"
  fi
  # Each check-step line of the page ends in DONE (the solution's code is in place).
  checks=$(grep -c '^scripts/check-step' <<<"$block" || true)
  done=$(grep -cE '^step [0-9a-z]+: DONE' "$WORK/$step.log" || true)
  [ "$done" = "$checks" ] || { tail -n 20 "$WORK/$step.log"; fail "$step: $checks check-step line(s), $done DONE"; }
  echo "$step: $(grep -c . <<<"$block") lines, ran in $((SECONDS - start)) s$([ "$checks" = 0 ] || echo ", check-step: DONE")"
  pages=$((pages + 1))
done
[ "$pages" -gt 0 ] || fail "no step page ran"
pass "$pages step pages' Run blocks ran in order with the solutions in place ($((SECONDS - total)) s)"
