# Helpers of the python_bridge_* tests (sourced after lib.sh): the Python with torch that
# tests/CMakeLists.txt found (the set-up's venv), python/ on its path, and the figure lines that
# build/bin/model_weights and python/evaluate.py both print ("first batch loss X", "test loss X |
# test accuracy Y (K of N)", "... checksum X").
# shellcheck shell=bash
PY=${DDPW_PYTHON:?DDPW_PYTHON must name a python3 with torch and numpy (tests/CMakeLists.txt sets it)}
export PYTHONPATH=${DDPW_ROOT:?DDPW_ROOT must point at the project}/python${PYTHONPATH:+:$PYTHONPATH}

# first_batch_loss LOG, test_loss LOG, test_count LOG ("K of N"), checksum LOG: one figure.
first_batch_loss() { sed -nE 's/^first batch loss ([^ ]+) .*/\1/p' "$1"; }
test_loss()        { sed -nE 's/^test loss ([^ ]+) .*/\1/p' "$1"; }
test_count()       { sed -nE 's/^test loss .*\(([0-9]+ of [0-9]+)\)$/\1/p' "$1"; }
checksum()         { sed -nE 's/.*weights checksum ([^ ]+)$/\1/p' "$1"; }

# within A B TOL: |A - B| <= TOL; prints the difference.
within() {
  awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.3g", d; exit !(d <= tol) }'
}

# The first TRAIN and TEST samples of Fashion-MNIST as plain IDX files in folder OUT.
make_fashion_subset() {
  local out=$1 train=$2 test=$3
  mkdir -p "$out"
  "$PY" - "$FASHION" "$out" "$train" "$test" <<'PY'
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
