# Shared helpers of the fault tests (sourced). On top of the integration helpers (own temp folder,
# fail/pass, run_logged): timed runs, bounded waits, and the processes a test started, which are
# ended by PID (with their children) however the test exits. Every fault must end by itself,
# with a message a person can act on, within a stated bound: needing to be killed is a hang.
# shellcheck shell=bash
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
STEP0=$BIN/step0_single_gpu
STEP1=$BIN/solutions/step1_multigpu_fork
STEP2=$BIN/solutions/step2_env_launch
STEP3=$BIN/solutions/step3_multinode_slurm
export STEP0 STEP1 STEP2 STEP3   # for the tests that source this file

# ---- time -------------------------------------------------------------------------------------
# A bound is how long a fault may take on a machine with a CPU to spare. The suite runs tests side
# by side, and a CI runner can be busier still: a refusal that takes 0.5 s here took 12.7 s in CI
# (2026-11-29), beside a Slurm test's jobs. So the time the machine was saturated does not count
# against a bound, up to SLACK seconds more in all: on an idle machine every bound holds as stated,
# and a process that does not end by itself fails on any machine. Saturated: some task waiting for a
# CPU, for I/O or for memory (Linux's pressure stall information, /proc/pressure), or a virtual
# machine's CPUs taken by its host (steal time, /proc/stat, per CPU). Without /proc/pressure (an old
# kernel, psi=0) only steal time counts.
SLACK=20
# sample: sets SAMPLE to "WALL/CPU/IO/MEMORY/STEAL", all in microseconds: the clock, how long some
# task waited for a CPU, for I/O and for memory (since boot), and the host's steal time per CPU.
# Builtins only (no process): the waits below call it 20 times a second.
CLOCK_TICKS=$(getconf CLK_TCK) CPUS=$(nproc)
sample() {
  local resource line _ steal totals=
  for resource in cpu io memory; do
    line=
    { read -r line <"/proc/pressure/$resource"; } 2>/dev/null || true
    line=${line##*total=}; totals+=/${line:-0}
  done
  read -r _ _ _ _ _ _ _ _ steal _ </proc/stat
  SAMPLE=${EPOCHREALTIME//[!0-9]/}$totals/$(( ${steal:-0} * 1000000 / (CLOCK_TICKS * CPUS) ))
}
now() { sample; echo "$SAMPLE"; }  # now: a point in time (a SAMPLE)
over() { awk -v t="$1" -v b="$2" 'BEGIN { exit !(t > b) }'; }  # over T BOUND: true if T > BOUND
# late START BOUND: true when more than BOUND seconds have passed since START (a `now`), not
# counting the time the machine was saturated, or more than BOUND + SLACK in all. Sets TOOK (the
# wall clock) and BUSY (how much of it the machine was saturated), in seconds; took_text says both.
late() {
  sample
  local -a a z
  IFS=/ read -r -a a <<<"$1"; IFS=/ read -r -a z <<<"$SAMPLE"
  local took=$(( z[0] - a[0] )) busy=0 i int=${2%%.*} frac=
  for i in 1 2 3 4; do (( z[i] - a[i] > busy )) && busy=$(( z[i] - a[i] )); done
  (( busy > took )) && busy=$took
  [[ $2 == *.* ]] && frac=${2#*.}
  frac=${frac}000000; local bound=$(( ${int:-0} * 1000000 + 10#${frac:0:6} ))
  printf -v TOOK '%d.%02d' $(( took / 1000000 )) $(( took % 1000000 / 10000 ))
  printf -v BUSY '%d.%02d' $(( busy / 1000000 )) $(( busy % 1000000 / 10000 ))
  (( took - busy > bound || took > bound + SLACK * 1000000 ))
}
took_text() {
  if (( 10#${BUSY//./} > 10 )); then echo "${TOOK}s (${BUSY}s of it with the machine saturated)"; else echo "${TOOK}s"; fi
}

# ---- processes this test started --------------------------------------------------------------
STARTED_PIDS=()
kill_tree() {  # kill_tree PID: PID and its descendants (e.g. torchrun's workers), children first
  local c
  for c in $(pgrep -P "$1"); do kill_tree "$c"; done
  kill -9 "$1" 2>/dev/null || true
}
end_started() {
  local p
  for p in "${STARTED_PIDS[@]}"; do kill_tree "$p"; done
}
trap 'end_started; rm -rf "$WORK"' EXIT

# wait_bounded PID SECONDS: waits for our child PID and sets RC to its exit code. One still
# running after SECONDS is a hang: it is killed (with its children) and the test fails.
wait_bounded() {
  local start; start=$(now)
  while kill -0 "$1" 2>/dev/null; do
    if late "$start" "$2"; then kill_tree "$1"; fail "pid $1 still running after $(took_text), bound $2 s: a hang"; fi
    sleep 0.05
  done
  RC=0; wait "$1" || RC=$?
}

# wait_for_line LOG REGEX SECONDS: waits until LOG has a line matching REGEX; fails after SECONDS.
wait_for_line() {
  local start; start=$(now)
  until grep -qE -- "$2" "$1" 2>/dev/null; do
    late "$start" "$3" && { cat "$1" >&2; fail "no line matching /$2/ in $1 after $(took_text), bound $3 s"; }
    sleep 0.05
  done
}

# ---- timed runs in the foreground -------------------------------------------------------------
# run_timed LOG BOUND CMD...: runs CMD (output to LOG) with a hard limit of BOUND + SLACK s.
# Sets RC and ELAPSED; fails when it was late (above: BOUND, not counting a saturated machine).
run_timed() {
  local log=$1 bound=$2; shift 2
  local start; start=$(now)
  RC=0
  timeout --kill-after=5 "$(awk -v b="$bound" -v s="$SLACK" 'BEGIN { print int(b) + s }')" "$@" >"$log" 2>&1 || RC=$?
  if late "$start" "$bound"; then
    cat "$log" >&2
    fail "'$*' took $(took_text), more than the ${bound}s bound (exit $RC): a hang"
  fi
  ELAPSED=$(took_text)
}

# expect_error NAME BOUND WANT_RC REGEX CMD...: CMD must exit with WANT_RC within BOUND seconds,
# and its output must match the extended REGEX. The output stays in $LOG.
expect_error() {
  local name=$1 bound=$2 want=$3 regex=$4; shift 4
  LOG="$WORK/log.$(printf '%s' "$name" | tr -c 'A-Za-z0-9_.-' '_')"
  run_timed "$LOG" "$bound" "$@"
  [ "$RC" -eq "$want" ] || { cat "$LOG" >&2; fail "$name: exit $RC, expected $want"; }
  grep -qE -- "$regex" "$LOG" || { cat "$LOG" >&2; fail "$name: no message matching /$regex/"; }
  echo "ok   $name: exit $RC in $ELAPSED: $(grep -E -m1 -- "$regex" "$LOG" | cut -c1-200)"
}

# ---- launching --------------------------------------------------------------------------------
# free_port (integration/lib.sh): a TCP port nobody listens on now.

# launch_ranks N PORT PROGRAM ARGS...: starts N ranks the way torchrun would (RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), output in rank<r>.log, PIDs in RANK_PIDS.
launch_ranks() {
  local n=$1 port=$2 r; shift 2
  RANK_PIDS=()
  for r in $(seq 0 $((n - 1))); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$@" >"rank$r.log" 2>&1 &
    RANK_PIDS+=($!); STARTED_PIDS+=($!)
  done
}

# child_with_env PARENT VAR=VALUE: the PID of PARENT's child whose environment has VAR=VALUE,
# e.g. torchrun's worker of RANK=1, or step 1's worker of DDPW_SPAWN_RANK=1 (empty if none).
child_with_env() {
  local p
  for p in $(pgrep -P "$1"); do
    grep -qzx -- "$2" "/proc/$p/environ" 2>/dev/null && { echo "$p"; return; }
  done
}
torchrun_worker() { child_with_env "$1" "RANK=$2"; }
spawn_worker() { child_with_env "$1" "DDPW_SPAWN_RANK=$2"; }

# ---- data and results -------------------------------------------------------------------------
# make_idx DIR COUNT [gz]: the four MNIST-format files with COUNT random 28x28 images (test: COUNT/2).
make_idx() {
  python3 - "$@" <<'PY'
import gzip, os, random, struct, sys
d, n, gz = sys.argv[1], int(sys.argv[2]), len(sys.argv) > 3
os.makedirs(d, exist_ok=True)
rng = random.Random(1)
def write(name, data):
    opener = gzip.open if gz else open
    with opener(os.path.join(d, name + (".gz" if gz else "")), "wb") as f:
        f.write(data)
for prefix, count in (("train", n), ("t10k", max(1, n // 2))):
    write(prefix + "-images-idx3-ubyte",
          struct.pack(">IIII", 2051, count, 28, 28) + bytes(rng.randrange(256) for _ in range(count * 784)))
    write(prefix + "-labels-idx1-ubyte", struct.pack(">II", 2049, count) + bytes(rng.randrange(10) for _ in range(count)))
PY
}

# The "final weights checksum" of rank 0 (the first such line) in a log.
final_checksum() { grep -m1 'final weights checksum' "$1" | awk '{print $NF}'; }
