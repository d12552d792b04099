#!/usr/bin/env bash
# docs.page_code: every complete C++ program of the pages (README.md, docs/*.md: ```cpp blocks,
# compiled into page_examples by the build, which already failed if one does not compile) runs
# under torchrun with 2 ranks on the CPU and exits 0; every ```python block runs.
#   page_code.sh PAGE_EXAMPLES PYTHON_DIR        (DDPW_PYTHON: the venv's python, for the snippets)
set -euo pipefail
bin=${1:?usage: page_code.sh PAGE_EXAMPLES PYTHON_DIR}
python_dir=${2:?usage: page_code.sh PAGE_EXAMPLES PYTHON_DIR}
VENV_BIN=${DDPW_HOME:-$HOME/.cache/ddp-workshop}/venv/bin
[ -d "$VENV_BIN" ] && PATH=$PATH:$VENV_BIN
command -v torchrun >/dev/null || { echo "FAIL: torchrun not found (scripts/setup.sh installs it in its venv)" >&2; exit 1; }
work=$(mktemp -d /tmp/ddpw-page-code.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM
start=$(date +%s)

mapfile -t programs < <("$bin" --list)
[ ${#programs[@]} -gt 0 ] || { echo "FAIL: $bin lists no complete program" >&2; exit 1; }
failed=0
for where in "${programs[@]}"; do
  log=$work/$(echo "$where" | tr -c 'A-Za-z0-9\n' _).log
  if timeout --kill-after=10 60 torchrun --standalone --nproc_per_node=2 --no-python "$bin" "$where" >"$log" 2>&1; then
    echo "ok   $where (2 ranks)"
  else
    tail -n 30 "$log" >&2
    echo "FAIL $where: under torchrun with 2 ranks it did not exit 0 (its output: above)" >&2
    failed=1
  fi
done

shopt -s nullglob
snippets=("$python_dir"/*.py)
for snippet in "${snippets[@]}"; do
  if timeout 60 "${DDPW_PYTHON:-python3}" "$snippet" >"$work/python.log" 2>&1; then
    echo "ok   $(head -n 1 "$snippet" | cut -c3-) (python)"
  else
    tail -n 30 "$work/python.log" >&2
    echo "FAIL $(head -n 1 "$snippet" | cut -c3-): the Python snippet did not exit 0 (its output: above)" >&2
    failed=1
  fi
done
[ "$failed" -eq 0 ] || exit 1
echo "PASS: ${#programs[@]} complete C++ programs of the pages ran with 2 ranks, ${#snippets[@]} Python snippets ran;" \
     "$(( $(date +%s) - start )) s"
