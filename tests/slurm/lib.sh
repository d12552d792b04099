# defines: helpers for the Slurm tests (sourced): a private cluster per test, up at the start and
#          down on ANY exit; submitting the clusters' real batch scripts with only the site's
#          account/partition/gres and modules replaced; a bounded wait; checks on the job logs.
# shellcheck shell=bash
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin  # useradd, munged, slurmd: root's tools, not on the PATH `su` (without -) keeps

slurm_tests=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export DDPW_ROOT=${DDPW_ROOT:-$(cd "$slurm_tests/../.." && pwd)}
export DDPW_BIN=${DDPW_BIN:-$DDPW_ROOT/build/bin}
SBATCH_EXTRA=()
job_timeout=${DDPW_SLURM_JOB_TIMEOUT:-180}   # seconds one job may take, queue included

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*"; }

# Skips (77) only where this cannot run at all; anything else missing is a failure.
require_slurm() {
  [ "$(id -u)" = 0 ] || skip "the Slurm tests need root (Slurm daemons, network namespaces)"
  local tool
  for tool in sbatch squeue scontrol slurmctld slurmd munged mungekey; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
      skip "Slurm is not installed ($tool missing): apt-get install slurm-wlm munge"
  done
}
require_programs() {
  local p
  for p in "$@"; do
    [ -x "$DDPW_BIN/$p" ] || fail "$DDPW_BIN/$p is not built: cmake --build build --target ${p##*/}"
  done
}
require_torchrun() {
  local torchrun
  torchrun=$(command -v torchrun || echo "${DDPW_HOME:-$HOME/.cache/ddp-workshop}/venv/bin/torchrun")
  [ -x "$torchrun" ] || fail "torchrun not found: put a torch environment's bin on PATH (scripts/setup.sh)"
  export DDPW_TEST_TORCH_BIN=${torchrun%/*}
}

# start_cluster single|netns [NNODES]: one test at a time on this machine (they share ports and
# the 10.77.0.0/24 bridge), a fresh state folder, and cleanup on any exit.
start_cluster() {
  exec 9> /tmp/ddpw-slurm-tests.lock
  flock -w 900 9 || fail "another Slurm test held /tmp/ddpw-slurm-tests.lock for 15 min"
  # Holding the lock, any cluster still listed was left by a run that was killed: take it down.
  local stale
  if [ -f /run/ddpw-slurm-test.clusters ]; then
    while read -r stale; do
      [ -d "$stale" ] || continue
      note "taking down a cluster left by a killed run: $stale"
      "$slurm_tests/cluster-down.sh" "$stale" 9>&-
      case $stale in /tmp/ddpw-slurm.*/cluster) rm -rf "${stale%/cluster}" ;; esac
    done < <(cat /run/ddpw-slurm-test.clusters)
    : > /run/ddpw-slurm-test.clusters
  fi
  remove_test_users   # and users a killed run had made (test-workshop.sh)
  TEST_DIR=$(mktemp -d /tmp/ddpw-slurm.XXXXXX)
  trap cleanup EXIT
  trap 'echo "FAIL: interrupted (the test'"'"'s own deadline, or Ctrl-C)" >&2; exit 130' INT TERM
  # Our own deadline, below CTest's TIMEOUT (CTest kills with SIGKILL, which skips the cleanup).
  # Its output goes nowhere: CTest waits for every holder of the test's stdout to finish.
  ( trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    me=$BASHPID
    sleep "${DDPW_SLURM_TEST_TIMEOUT:-540}" & sleeper=$!
    # only while this test still runs (our parent): its PID may belong to another process later
    wait "$sleeper" && [ "$(ps -o ppid= -p "$me" | tr -d ' ')" = $$ ] && kill -TERM $$
  ) >/dev/null 2>&1 </dev/null 9>&- &
  WATCHDOG=$!
  local started=$SECONDS
  # 9>&-: the daemons must not inherit the lock (they would hold it after a killed run).
  "$slurm_tests/cluster-up.sh" "$1" "$TEST_DIR/cluster" "${2:-2}" > "$TEST_DIR/cluster-up.log" 2>&1 9>&- ||
    { cat "$TEST_DIR/cluster-up.log" >&2; fail "cluster-up.sh $1 failed"; }
  # shellcheck source=/dev/null
  source "$TEST_DIR/cluster/env"   # SLURM_CONF
  note "Slurm cluster ($1, $(sinfo -h -o %D) node(s)) up in $((SECONDS - started)) s: $TEST_DIR"
  # What a site's modules would give, and what a machine without GPUs and as root needs.
  export DDPW_SITE_ENV=$slurm_tests/site-env.sh
  export DDPW_EXTRA_ARGS="--device cpu"
  export DDPW_MPI_FLAGS_EXTRA="--allow-run-as-root --oversubscribe"
}

cleanup() {
  local rc=$?
  set +e   # tear down everything, whatever fails on the way
  trap - EXIT INT TERM
  [ -n "${WATCHDOG:-}" ] && kill "$WATCHDOG" 2>/dev/null
  if [ -n "${TEST_DIR:-}" ] && [ -d "$TEST_DIR" ]; then
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
      echo "== failed: the daemons' last log lines ==" >&2
      tail -n 15 "$TEST_DIR"/cluster/log/slurm*.log >&2 2>/dev/null
    fi
    "$slurm_tests/cluster-down.sh" "$TEST_DIR/cluster"
    remove_test_users
    if [ "${DDPW_KEEP_TEST_DIR:-0}" = 1 ]; then echo "kept $TEST_DIR"; else rm -rf "$TEST_DIR"; fi
  fi
  exit "$rc"
}

# torch_share PROGRAM: the folders the learners' jobs need inside the nodes (DDPW_CLUSTER_SHARE,
# colon-separated): the torch environment (torchrun, LibTorch) and the Python install its venv points
# to, and PROGRAM's LibTorch folder, which may lie where only root may enter (/root, a mktemp -d
# set-up home): cluster-up.sh opens the closed ones. Needs require_torchrun first.
torch_share() {
  local share=() path python inside s
  python=$(readlink -f "$DDPW_TEST_TORCH_BIN/python3")
  for path in "${DDPW_TEST_TORCH_BIN%/bin}" "${python%/bin/*}" $(readelf -d "$1" |
                                              sed -nE 's/.*R(UN)?PATH.*\[(.*)\]/\2/p' | tr ':' ' '); do
    inside=0
    for s in ${share[@]+"${share[@]}"}; do case $path/ in "$s"/*) inside=1 ;; esac; done
    [ $inside = 1 ] || [ ! -e "$path" ] || share+=("$path")
  done
  (IFS=:; echo "${share[*]}")
}

# ---- Unix users made for a test (test-workshop.sh, test-progress.sh): listed in /run/ddpw-slurm-test.users from the
# moment they exist, removed (with their homes) when the test ends, whatever ends it, or by the next
# test if a killed run could not.
TEST_USERS_LIST=/run/ddpw-slurm-test.users
add_test_user() {  # add_test_user NAME HOME
  id "$1" >/dev/null 2>&1 && fail "user $1 exists already: not one this test made (remove it, or set DDPW_WORKSHOP_USER_PREFIX)"
  echo "$1" >> "$TEST_USERS_LIST"
  useradd --create-home --home-dir "$2" --shell /bin/bash --user-group "$1" || fail "useradd $1 failed"
}
remove_test_users() {
  [ -s "$TEST_USERS_LIST" ] || return 0
  local user
  while read -r user; do
    id "$user" >/dev/null 2>&1 || continue   # (an empty line too)
    # Its jobs' processes lived in the cluster's namespaces, which cluster-down.sh ended by PID.
    if [ "${DDPW_KEEP_TEST_DIR:-0}" = 1 ]; then   # keep the homes (in the test folder) for a look
      userdel --force "$user" || echo "warning: userdel $user failed" >&2
    else
      userdel --force --remove "$user" >/dev/null 2>&1 || userdel --force "$user" || echo "warning: userdel $user failed" >&2
    fi
  done < "$TEST_USERS_LIST"
  rm -f "$TEST_USERS_LIST"
}

# The options that replace a site's placeholders: the test cluster has one partition, no
# accounting, and untyped GPUs (4 per node).
site_options() {
  case $1 in
    delta)      echo "--account=ci-delta-gpu --partition=debug" ;;
    hipergator) echo "--partition=debug" ;;
    della)      echo "--partition=debug" ;;
    puhti|roihu) echo "--account=project_0 --partition=debug --gres=gpu:2" ;;
    supercloud) echo "--partition=debug --gres=gpu:2" ;;
    *) fail "unknown site $1" ;;
  esac
}

# submit SITE SCRIPT [SCRIPT ARGS...]: sbatch clusters/SITE/SCRIPT from a fresh run folder (or
# SUBMIT_DIR), wait
# (bounded), and set JOB_ID, JOB_STATE, JOB_EXIT ("0:0"), JOB_LOG, RUN_DIR, JOB_SECONDS.
# SBATCH_EXTRA (an array) and SBATCH_OPTS (a string, for one call) add sbatch options,
# SITE_OPTIONS replaces site_options' (a string);
# SUBMIT_NO_WAIT=1 returns right after sbatch.
submit() {
  local site=$1 script=$2; shift 2
  SUBMISSIONS=$((${SUBMISSIONS:-0} + 1))   # a fresh folder each time: no snapshot to resume from
  RUN_DIR=${SUBMIT_DIR:-$TEST_DIR/runs/$SUBMISSIONS-$site-${script%.sbatch}}   # SUBMIT_DIR: reuse one
  mkdir -p "$RUN_DIR"
  local -a opts more=()
  read -r -a opts <<< "${SITE_OPTIONS-$(site_options "$site")}"
  read -r -a more <<< "${SBATCH_OPTS:-}"   # per call: SBATCH_OPTS="--array=0-1" submit ...
  JOB_ID=$(cd "$RUN_DIR" && sbatch --parsable "${opts[@]}" "${SBATCH_EXTRA[@]}" "${more[@]}" \
             "$DDPW_ROOT/clusters/$site/$script" "$@") || fail "sbatch $site/$script was refused"
  JOB_ID=${JOB_ID%%;*}
  JOB_STARTED=$SECONDS
  [ "${SUBMIT_NO_WAIT:-0}" = 1 ] && return 0
  wait_job
  note "$site/$script $*: job $JOB_ID $JOB_STATE (exit $JOB_EXIT) in $JOB_SECONDS s on $JOB_NODES"
}

# job_field NAME: one field of `scontrol show job` (empty if the controller does not answer).
job_field() { scontrol show job -o "$JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1 || true; }

# Polls the controller (sbatch --wait polls every 2-10 s); a job over the limit is cancelled.
wait_job() {
  local deadline=$((SECONDS + job_timeout))
  while :; do
    JOB_STATE=$(job_field JobState)
    case $JOB_STATE in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;;
    esac
    if [ "$SECONDS" -ge "$deadline" ]; then
      scancel "$JOB_ID" 2>/dev/null || true
      JOB_LOG=$(job_field StdOut); show_log
      fail "job $JOB_ID did not finish within $job_timeout s (state $JOB_STATE); cancelled"
    fi
    sleep 0.3
  done
  JOB_EXIT=$(job_field ExitCode)
  JOB_LOG=$(job_field StdOut)
  JOB_NODES=$(job_field NodeList)
  JOB_SECONDS=$((SECONDS - JOB_STARTED))
}

show_log() { echo "----- $JOB_LOG -----" >&2; cat "$JOB_LOG" >&2 2>/dev/null || echo "(no log)" >&2; echo "-----" >&2; }

expect_success() {
  if [ "$JOB_STATE" != COMPLETED ] || [ "$JOB_EXIT" != 0:0 ]; then
    show_log; fail "job $JOB_ID: state $JOB_STATE, exit $JOB_EXIT (expected COMPLETED, 0:0)"
  fi
}
expect_failure() {  # the job must fail, and its log must say why (grep -E PATTERN)
  [ "$JOB_STATE" = FAILED ] || { show_log; fail "job $JOB_ID: state $JOB_STATE, expected FAILED"; }
  grep -Eq -- "$1" "$JOB_LOG" || { show_log; fail "job $JOB_ID failed, but its log lacks: $1"; }
}
# expect_lines COUNT PATTERN: exactly COUNT log lines match (grep -E).
expect_lines() {
  local n
  n=$(grep -Ec -- "$2" "$JOB_LOG" || true)
  [ "$n" = "$1" ] || { show_log; fail "job $JOB_ID: $n lines match '$2', expected $1"; }
}
expect_nodes() {  # the job ran on exactly these nodes, e.g. "node[1-2]"
  [ "$JOB_NODES" = "$1" ] || { show_log; fail "job $JOB_ID ran on $JOB_NODES, expected $1"; }
}
# The job's name as its script gave it: a job that runs step programs adds -solution or -exercise
# at its start (clusters/common.sh, ddpw_name_job), its snapshot keeps this one.
job_base_name() { local name; name=$(job_field JobName); name=${name%-solution}; echo "${name%-exercise}"; }

# expect_job_name NAME: the job is (now) called NAME, as squeue and sacct show it.
expect_job_name() {
  local name; name=$(job_field JobName)
  [ "$name" = "$1" ] || { show_log; fail "job $JOB_ID is called '$name', expected '$1'"; }
}

# expect_one_snapshot [KIND]: the run folder holds exactly one snapshot file, the scripts' default
# for the job and KIND (solution: the default programs; exercise: DDPW_PROGRAMS=build/bin), and
# nothing half-written.
expect_one_snapshot() {
  local files want
  want="snapshots/$(job_base_name).${1:-solution}.pt"
  files=$(find "$RUN_DIR/snapshots" -type f -printf 'snapshots/%P ' 2>/dev/null | sort || true)
  [ "$files" = "$want " ] || { show_log; fail "job $JOB_ID: snapshot files '${files% }', expected exactly $want"; }
}

# expect_sharded_snapshot RANKS GENERATION [KIND]: the run folder holds exactly one sharded snapshot:
# the manifest (the scripts' default path for the job and KIND) and one shard per rank of save
# GENERATION; no older generation is left, nothing half-written.
expect_sharded_snapshot() {
  local ranks=$1 generation=$2 manifest files want r
  manifest="snapshots/$(job_base_name).${3:-solution}.pt"
  want="$manifest "
  for ((r = 0; r < ranks; r++)); do want+="$manifest.g$generation.rank$r-of-$ranks "; done
  files=$(cd "$RUN_DIR" && find snapshots -type f 2>/dev/null | sort | tr '\n' ' ' || true)
  [ "$files" = "$want" ] || { show_log; fail "job $JOB_ID: snapshot files '$files', expected '$want'"; }
}

# expect_equal_checksums RANKS: the ranks' final weights, one checksum line each, all equal.
expect_equal_checksums() {
  expect_lines "$1" "final weights checksum"
  local sums
  sums=$(grep -E 'final weights checksum' "$JOB_LOG" | awk '{print $NF}' | sort -u)
  [ "$(echo "$sums" | wc -l)" = 1 ] || { show_log; fail "job $JOB_ID: the ranks ended with different weights: $sums"; }
  note "$1 ranks, weights checksum $sums"
}

# A small copy of Fashion-MNIST (same IDX format as MNIST) for the MNIST scripts: the first
# TRAIN/TEST images, as a site's data/mnist would hold them, placed before the job starts.
make_mnist_subset() {
  local out=$1 train=${2:-1200} test=${3:-400}
  local src=${DDPW_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  [ -f "$src/train-images-idx3-ubyte.gz" ] ||
    fail "$src/train-images-idx3-ubyte.gz missing: apt-get install dataset-fashion-mnist (or set DDPW_FASHION_MNIST)"
  mkdir -p "$out"
  python3 - "$src" "$out" "$train" "$test" <<'PY'
import gzip, struct, sys
src, out, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for prefix, n in (("train", n_train), ("t10k", n_test)):
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        data = gzip.open(f"{src}/{prefix}-{kind}.gz").read()
        dims = data[3]
        shape = list(struct.unpack(f">{dims}I", data[4:4 + 4 * dims]))
        per_item = 1
        for d in shape[1:]:
            per_item *= d
        shape[0] = n
        header = data[:4] + struct.pack(f">{dims}I", *shape)
        body = data[4 + 4 * dims: 4 + 4 * dims + n * per_item]
        open(f"{out}/{prefix}-{kind}", "wb").write(header + body)
PY
}
