#!/usr/bin/env bash
# The exercise checker must fail when a solution changes a line outside its TODO blocks: far from
# any TODO, below a line that only mentions a TODO, inside a function below a TODO block, and right
# after the block a TODO sits in (a TODO block ends at a blank line or where the code returns to a
# lower indentation).
set -euo pipefail
root=${1:?project root}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
step=step1_multigpu_fork
exercise=$root/$step/main.cpp solution=$root/solutions/$step/main.cpp

# expect_caught NAME EXERCISE_FILE SOLUTION_FILE: the checker must reject the pair, naming the line.
expect_caught() {
  local name=$1 case=$tmp/$1
  mkdir -p "$case/$step" "$case/solutions/$step"
  cp "$2" "$case/$step/main.cpp"
  cp "$3" "$case/solutions/$step/main.cpp"
  if python3 "$root/tests/check_exercises.py" "$case" >"$case/out" 2>&1; then
    cat "$case/out"; echo "FAIL ($name): the checker accepted a change outside the TODO blocks"; exit 1
  fi
  grep -q "changed outside a TODO(step1) block" "$case/out" || { cat "$case/out"; echo "FAIL ($name): wrong message"; exit 1; }
  echo "ok: $name: $(grep -m1 'changed outside' "$case/out")"
}

# 1. The first line of the file, far from any TODO block.
sed '1s/.*/\/\/ a stray edit outside any TODO block/' "$solution" >"$tmp/first_line.cpp"
expect_caught first_line "$exercise" "$tmp/first_line.cpp"

# 2. In the header comment below a line that mentions "marked TODO(step1)": a mention is not a
#    TODO block, only a comment that starts with TODO(step1) is.
grep -q 'differ only inside those blocks' "$solution" || { echo "FAIL: the header changed: update this test"; exit 1; }
sed 's/differ only inside those blocks/differ only inside the TODO blocks/' "$solution" >"$tmp/header.cpp"
expect_caught header_after_mention "$exercise" "$tmp/header.cpp"

# 3. Inside worker(), below the TODO block that joins the process group (past its blank line).
grep -q '^  ddp::print_settings(opt, launch, device, threads, launch.global_rank);$' "$solution" \
  || { echo "FAIL: worker() no longer calls print_settings: update this test"; exit 1; }
sed 's/^  ddp::print_settings(opt, launch, device, threads, launch.global_rank);$/  ddp::print_settings(opt, launch, device, 1, launch.global_rank);/' \
  "$solution" >"$tmp/in_function.cpp"
expect_caught in_function "$exercise" "$tmp/in_function.cpp"

# 4. A function right after main(), whose last lines are a TODO block, with no blank line between:
#    the block ends at main()'s closing brace (it once ran on to the next blank line or the end of
#    the file, and accepted this).
tail -n1 "$solution" | grep -qx '}' || { echo "FAIL: the solution no longer ends with main()'s brace: update this test"; exit 1; }
{ cat "$exercise"; printf 'int after_main() {\n  return 1;\n}\n'; } >"$tmp/after_main_exercise.cpp"
{ cat "$solution"; printf 'int after_main() {\n  return 2;\n}\n'; } >"$tmp/after_main_solution.cpp"
expect_caught after_block_end "$tmp/after_main_exercise.cpp" "$tmp/after_main_solution.cpp"

echo "PASS: the checker rejects stray changes"
