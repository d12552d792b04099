# Shared helpers of the integration tests (sourced). Every test runs in its own temp folder,
# uses its own free port (never a fixed one: two test runs at once would meet), and ends only the
# processes it started.
# shellcheck shell=bash
set -euo pipefail
BIN=${DDPW_BIN:?DDPW_BIN must point at build/bin}
export BIN
VENV_BIN=${DDPW_HOME:-$HOME/.cache/ddp-workshop}/venv/bin
[ -d "$VENV_BIN" ] && PATH=$PATH:$VENV_BIN
WORK=$(mktemp -d /tmp/ddpw-it.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# A TCP port nobody listens on now (the kernel picks it; the test uses it at once).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pass() { echo "PASS: $*"; }

# Fashion-MNIST's folder: the Debian package's, or DDPW_FASHION_MNIST (a copy of its four .gz files,
# e.g. on a machine without the package).
FASHION=${DDPW_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
require_fashion_mnist() {
  [ -f "$FASHION/train-images-idx3-ubyte.gz" ] || fail "Fashion-MNIST missing in $FASHION" \
    "(apt-get install dataset-fashion-mnist, or set DDPW_FASHION_MNIST to a folder with its .gz files)"
}

# Runs a command with a hard time limit, output to a log; returns its exit code.
run_logged() {
  local log=$1; shift
  local rc=0
  timeout --kill-after=10 "${DDPW_TEST_TIMEOUT:-240}" "$@" >"$log" 2>&1 || rc=$?
  return $rc
}

# "Epoch N | train loss X" lines printed by rank 0: the loss of the first and the last epoch.
first_loss() { grep -m1 -E '^Epoch [0-9]+ \| train loss' "$1" | sed -E 's/.*train loss ([0-9.e+-]+).*/\1/'; }
last_loss()  { grep -E '^Epoch [0-9]+ \| train loss' "$1" | tail -n1 | sed -E 's/.*train loss ([0-9.e+-]+).*/\1/'; }

# The checks every distributed run must pass: the loss fell, every rank ended with the same
# weights, exactly `ranks` ranks reported, only rank 0 wrote the snapshot (the program's own file,
# snapshot-stepN-solution.pt by default).
check_training_log() {
  local log=$1 ranks=$2 writer=$3
  local a b
  a=$(first_loss "$log"); b=$(last_loss "$log")
  if [ -z "$a" ] || [ -z "$b" ]; then fail "no epoch lines in $log"; fi
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }' || fail "loss did not fall ($a -> $b)"
  local sums
  sums=$(grep -E 'final weights checksum' "$log" | awk '{print $NF}' | sort -u)
  [ "$(grep -cE 'final weights checksum' "$log")" -eq "$ranks" ] || fail "expected $ranks checksum lines"
  [ "$(echo "$sums" | wc -l)" -eq 1 ] || fail "ranks ended with different weights: $sums"
  local writers
  writers=$(grep -E 'Training snapshot saved' "$log" | sed -E 's/^(\[[^]]*\]).*/\1/' | sort -u)
  [ "$writers" = "$writer" ] || fail "snapshot writers were '$writers', expected only '$writer'"
  local snapshots; snapshots=$(find . -maxdepth 1 -name 'snapshot-*.pt' -size +0)
  [ "$(echo "$snapshots" | grep -c .)" -eq 1 ] || fail "expected one snapshot file, found: ${snapshots:-none}"
  echo "loss $a -> $b; $ranks ranks, weights checksum $sums; writer $writer"
}

# The first TRAIN and TEST samples of Fashion-MNIST as plain IDX files in folder OUT.
make_fashion_subset() {
  local out=$1 train=$2 test=$3
  mkdir -p "$out"
  python3 - "$FASHION" "$out" "$train" "$test" <<'PY'
import gzip, struct, sys
src, out, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for prefix, n in (("train", n_train), ("t10k", n_test)):
    for kind, item in (("images-idx3-ubyte", 28 * 28), ("labels-idx1-ubyte", 1)):
        data = gzip.open(f"{src}/{prefix}-{kind}.gz").read()
        header = 16 if kind.startswith("images") else 8
        with open(f"{out}/{prefix}-{kind}", "wb") as f:
            f.write(data[:4] + struct.pack(">I", n) + data[8:header] + data[header:header + n * item])
PY
}
