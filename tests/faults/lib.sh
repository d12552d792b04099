# Shared helpers of the fault tests (sourced): the integration helpers (own temp folder, fail/pass,
# run_logged) plus timed runs. Every fault must end by itself, non-zero, with a message a person
# can act on, within a stated bound: a run that needs the hard `timeout` to end counts as a hang.
# shellcheck shell=bash
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
FAULTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STEP0=$BIN/step0_single_gpu
STEP1=$BIN/solutions/step1_multigpu_fork
STEP2=$BIN/solutions/step2_env_launch
STEP3=$BIN/solutions/step3_multinode_slurm

now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
over() { awk -v t="$1" -v b="$2" 'BEGIN { exit !(t > b) }'; }

# run_timed LOG BOUND CMD...: runs CMD (output to LOG) with a hard limit of BOUND + 20 s.
# Sets RC and ELAPSED; fails when it took longer than BOUND seconds.
run_timed() {
  local log=$1 bound=$2; shift 2
  local start; start=$(now)
  RC=0
  timeout --kill-after=5 "$(awk -v b="$bound" 'BEGIN { print int(b) + 20 }')" "$@" >"$log" 2>&1 || RC=$?
  ELAPSED=$(seconds_since "$start")
  if over "$ELAPSED" "$bound"; then
    cat "$log" >&2
    fail "'$*' took ${ELAPSED}s, more than the ${bound}s bound (exit $RC): a hang"
  fi
}

# expect_error NAME BOUND WANT_RC REGEX CMD...: CMD must exit with WANT_RC ("nonzero": any but 0)
# within BOUND seconds, and its output must match the extended REGEX. The output stays in $LOG.
expect_error() {
  local name=$1 bound=$2 want=$3 regex=$4; shift 4
  LOG="$WORK/log.$(printf '%s' "$name" | tr -c 'A-Za-z0-9_.-' '_')"
  local log=$LOG
  run_timed "$log" "$bound" "$@"
  if [ "$want" = nonzero ]; then
    [ "$RC" -ne 0 ] || { cat "$log" >&2; fail "$name: exit 0, expected an error"; }
  else
    [ "$RC" -eq "$want" ] || { cat "$log" >&2; fail "$name: exit $RC, expected $want"; }
  fi
  grep -qE -- "$regex" "$log" || { cat "$log" >&2; fail "$name: no message matching /$regex/"; }
  echo "ok   $name: exit $RC in ${ELAPSED}s: $(grep -E -m1 -- "$regex" "$log" | cut -c1-200)"
}

# A TCP port nobody listens on now (the kernel picks it; a test uses it at once).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

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

# Background processes a test started: ended (by PID) when the test exits, however it exits.
STARTED_PIDS=()
end_started() {
  local p
  for p in "${STARTED_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap 'end_started; rm -rf "$WORK"' EXIT
