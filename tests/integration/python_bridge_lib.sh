# Helpers of the python_bridge_* tests (sourced after lib.sh): the Python with torch that
# tests/CMakeLists.txt found (the set-up's venv), python/ on its path, and the figure lines that
# build/bin/model_weights and python/evaluate.py both print ("first batch loss X", "test loss X |
# test accuracy Y (K of N)", "... checksum X").
# shellcheck shell=bash
# shellcheck disable=SC2034  # PY is for the tests that source this file
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

