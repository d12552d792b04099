#!/usr/bin/env bash
# The exercise checker must fail when a solution changes a line outside its TODO blocks.
set -euo pipefail
root=${1:?project root}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/solutions/step1_multigpu_fork" "$tmp/step1_multigpu_fork"
cp "$root/step1_multigpu_fork/main.cpp" "$tmp/step1_multigpu_fork/main.cpp"
# A change far from any TODO block: the first line of the file.
sed '1s/.*/\/\/ a stray edit outside any TODO block/' "$root/solutions/step1_multigpu_fork/main.cpp" \
  > "$tmp/solutions/step1_multigpu_fork/main.cpp"
if python3 "$root/tests/check_exercises.py" "$tmp" >"$tmp/out" 2>&1; then
  cat "$tmp/out"; echo "FAIL: the checker accepted a change outside the TODO blocks"; exit 1
fi
grep -q "changed outside a TODO(step1) block" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: wrong message"; exit 1; }
echo "PASS: the checker rejects a stray change"
