#!/usr/bin/env bash
# The exercise checker must fail when a solution changes a line outside its TODO blocks: far from
# any TODO, below a line that only mentions a TODO, inside a function below a TODO block, and right
# after the block a TODO sits in (a TODO block ends at a blank line or where the code returns to a
# lower indentation); and when a plumbing edit is made in one exercise/solution pair only, so that
# exercise N is no longer solution N-1 plus step N's blocks.
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
grep -q 'blocks marked TODO(step1): the parent starts the workers' "$solution" &&
  grep -q '^// localhost, each trains on its own shard' "$solution" || { echo "FAIL: the header changed: update this test"; exit 1; }
sed 's/^\/\/ localhost, each trains on its own shard/\/\/ localhost, each trains on a shard/' "$solution" >"$tmp/header.cpp"
expect_caught header_after_mention "$exercise" "$tmp/header.cpp"

# 3. Inside worker(), below the TODO block that joins the process group (past its blank line).
grep -q '^  ddpw::print_settings(opt, launch, device, threads, launch.global_rank);$' "$solution" \
  || { echo "FAIL: worker() no longer calls print_settings: update this test"; exit 1; }
sed 's/^  ddpw::print_settings(opt, launch, device, threads, launch.global_rank);$/  ddpw::print_settings(opt, launch, device, 1, launch.global_rank);/' \
  "$solution" >"$tmp/in_function.cpp"
expect_caught in_function "$exercise" "$tmp/in_function.cpp"

# 4. A function right after main(), whose last lines are a TODO block, with no blank line between:
#    the block ends at main()'s closing brace (it once ran on to the next blank line or the end of
#    the file, and accepted this).
tail -n1 "$solution" | grep -qx '}' || { echo "FAIL: the solution no longer ends with main()'s brace: update this test"; exit 1; }
{ cat "$exercise"; printf 'int after_main() {\n  return 1;\n}\n'; } >"$tmp/after_main_exercise.cpp"
{ cat "$solution"; printf 'int after_main() {\n  return 2;\n}\n'; } >"$tmp/after_main_solution.cpp"
expect_caught after_block_end "$tmp/after_main_exercise.cpp" "$tmp/after_main_solution.cpp"

# 5. A plumbing edit made in one copy only: the step 2 exercise and its solution both change the
#    same line of the trainer (so they still differ only in their TODO blocks), but solution 1
#    does not: exercise 2 is no longer solution 1 plus step 2's blocks.
chain=$tmp/chain
mkdir -p "$chain/solutions"
for dir in "$root"/step*_*/; do
  name=$(basename "$dir")
  mkdir -p "$chain/$name"
  cp "$dir/main.cpp" "$chain/$name/main.cpp"
  [ -f "$root/solutions/$name/main.cpp" ] && mkdir -p "$chain/solutions/$name" &&
    cp "$root/solutions/$name/main.cpp" "$chain/solutions/$name/main.cpp"
done
python3 "$root/tests/check_exercises.py" "$chain" >"$chain/out.before" 2>&1 ||
  { cat "$chain/out.before"; echo "FAIL (one_copy_only): the unchanged copy of the tree does not pass"; exit 1; }
line='    first_step_ = 0;'
grep -qx -- "$line" "$chain/step2_env_launch/main.cpp" || { echo "FAIL: '$line' is gone: update this test"; exit 1; }
for f in "$chain/step2_env_launch/main.cpp" "$chain/solutions/step2_env_launch/main.cpp"; do
  sed -i "s/^$line\$/    first_step_ = 0;  \/\/ a plumbing edit in the step 2 pair only/" "$f"
done
if python3 "$root/tests/check_exercises.py" "$chain" >"$chain/out" 2>&1; then
  cat "$chain/out"; echo "FAIL (one_copy_only): the checker accepted a plumbing edit made in one copy only"; exit 1
fi
grep -q '^step2_env_launch: ok' "$chain/out" || { cat "$chain/out"; echo "FAIL (one_copy_only): the pair itself should still pass"; exit 1; }
grep -q 'step2_env_launch/main.cpp:[0-9]*: differs from solutions/step1_multigpu_fork/main.cpp outside the header' "$chain/out" ||
  { cat "$chain/out"; echo "FAIL (one_copy_only): wrong message"; exit 1; }
echo "ok: one_copy_only: $(grep -m1 'differs from' "$chain/out")"

# 6. The pages quote each step's count (--docs): a wrong "K changed lines" on a step's page or in a
#    README.md row "| N ..." is named with the right count; right ones pass; other rows are ignored.
docs=$tmp/docs
mkdir -p "$docs/solutions/$step" "$docs/$step"
cp "$exercise" "$docs/$step/main.cpp"
cp "$solution" "$docs/solutions/$step/main.cpp"
count=$(python3 "$root/tests/check_exercises.py" "$docs" --counts | sed -n 's/^step1 //p')
[[ $count =~ ^[0-9]+$ ]] || { echo "FAIL (docs): --counts printed no count for step 1"; exit 1; }
printf 'You write %s changed lines.\n' "$count" >"$docs/$step/README.md"
printf '| 1 | spawn | %s changed lines |\n| all steps | 99 changed lines |\nin all 99 changed lines\n' "$count" >"$docs/README.md"
python3 "$root/tests/check_exercises.py" "$docs" --docs >"$docs/out" 2>&1 ||
  { cat "$docs/out"; echo "FAIL (docs): right counts were rejected"; exit 1; }
printf '| 1 | spawn | %s changed lines |\n' "$((count + 1))" >>"$docs/README.md"
if python3 "$root/tests/check_exercises.py" "$docs" --docs >"$docs/out" 2>&1; then
  cat "$docs/out"; echo "FAIL (docs): a wrong count in a README.md row was accepted"; exit 1
fi
grep -q "^README.md:4: says '$((count + 1)) changed lines' for step 1; tests/check_exercises.py counts $count" "$docs/out" ||
  { cat "$docs/out"; echo "FAIL (docs): wrong message"; exit 1; }
echo "ok: docs: $(grep -m1 'says' "$docs/out")"
printf '| [1](%s/README.md) | spawn | %s changed lines |\n' "$step" "$((count + 2))" >"$docs/README.md"   # a linked row
python3 "$root/tests/check_exercises.py" "$docs" --docs >"$docs/out" 2>&1 && { cat "$docs/out"; echo "FAIL (docs): a wrong count in a linked row was accepted"; exit 1; }
grep -q "^README.md:1: says '$((count + 2)) changed lines' for step 1" "$docs/out" || { cat "$docs/out"; echo "FAIL (docs): linked row"; exit 1; }

# 7. The optional step 1b branches off solution 1: exercise 1b may replace only the wrapper's TODO(step1)
#    blocks and add its own; a plumbing edit in the 1b pair only, or a line of another step 1 block
#    dropped from it, is caught; so is a wrong count in its README.md row and a program over 150 lines.
branch=$tmp/branch
cp -r "$chain" "$branch"
cp "$root/step2_env_launch/main.cpp" "$branch/step2_env_launch/main.cpp"
cp "$root/solutions/step2_env_launch/main.cpp" "$branch/solutions/step2_env_launch/main.cpp"
b=step1b_average_by_hand
[ -f "$branch/$b/main.cpp" ] || { echo "FAIL (branch): $b is gone: update this test"; exit 1; }
expect_branch_caught() {  # NAME REGEX: the checker fails on $branch, naming REGEX; then the copy is restored
  if python3 "$root/tests/check_exercises.py" "$branch" >"$branch/out" 2>&1; then
    cat "$branch/out"; echo "FAIL (branch $1): the checker accepted it"; exit 1
  fi
  grep -qE "$2" "$branch/out" || { cat "$branch/out"; echo "FAIL (branch $1): wrong message"; exit 1; }
  echo "ok: branch $1: $(grep -m1 -E "$2" "$branch/out")"
  cp "$root/$b/main.cpp" "$branch/$b/main.cpp"
  cp "$root/solutions/$b/main.cpp" "$branch/solutions/$b/main.cpp"
  cp "$root/README.md" "$branch/README.md" 2>/dev/null || rm -f "$branch/README.md"
}
python3 "$root/tests/check_exercises.py" "$branch" >"$branch/out" 2>&1 ||
  { cat "$branch/out"; echo "FAIL (branch): the unchanged copy does not pass"; exit 1; }
for f in "$branch/$b/main.cpp" "$branch/solutions/$b/main.cpp"; do
  sed -i "s/^$line\$/    first_step_ = 0;  \/\/ a plumbing edit in the 1b pair only/" "$f"
done
expect_branch_caught plumbing "$b/main.cpp:[0-9]+: differs from solutions/step1_multigpu_fork/main.cpp outside the header, the includes, its TODO\(step1b\) blocks"
guard='    if (launch_.global_rank != 0) return;'
grep -qxF -- "$guard" "$branch/$b/main.cpp" || { echo "FAIL (branch): '$guard' is gone: update this test"; exit 1; }
for f in "$branch/$b/main.cpp" "$branch/solutions/$b/main.cpp"; do grep -vxF -- "$guard" "$f" >"$f.new"; mv "$f.new" "$f"; done
expect_branch_caught other_block "solutions/step1_multigpu_fork/main.cpp:[0-9]+: missing from $b/main.cpp, but not in a block that step 1b replaces"
k=$(python3 "$root/tests/check_exercises.py" "$branch" --counts | sed -n 's/^step1b //p')
[[ $k =~ ^[0-9]+$ ]] || { echo "FAIL (branch): --counts printed no count for step 1b"; exit 1; }
printf '| [1b](%s/README.md) | by hand | %s changed lines |\n' "$b" "$((k + 1))" >"$branch/README.md"
python3 "$root/tests/check_exercises.py" "$branch" --docs >"$branch/out" 2>&1 && { cat "$branch/out"; echo "FAIL (branch docs): accepted"; exit 1; }
grep -q "^README.md:1: says '$((k + 1)) changed lines' for step 1b; tests/check_exercises.py counts $k" "$branch/out" ||
  { cat "$branch/out"; echo "FAIL (branch docs): wrong message"; exit 1; }
echo "ok: branch docs: $(grep -m1 'says' "$branch/out")"
for i in $(seq 1 160); do echo "// padding $i"; done >>"$branch/solutions/$b/main.cpp"
for i in $(seq 1 160); do echo "// padding $i"; done >>"$branch/$b/main.cpp"
expect_branch_caught too_long "solutions/$b/main.cpp: [0-9]+ lines, more than 150"

echo "PASS: the checker rejects stray changes, a branch's changes outside its blocks, programs over 150 lines and wrong changed-line counts on the pages"
