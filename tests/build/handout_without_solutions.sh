#!/usr/bin/env bash
# The copy an instructor hands out, in two states, configured and built from scratch by
# scripts/check-step itself (it builds only what the check needs):
#  1. with solutions/, step 1 done by the learner: `scripts/check-step 1` configures, builds the
#     library, the exercise and the solution, runs both on 2 CPU ranks and says DONE;
#  2. solutions/ removed and step 1 back as shipped: the configure says there are no solutions
#     (no solution targets, no tests), the six steps build, and every exercise behaves as with
#     solutions/ (tests/integration/exercises_run.sh on this build: each one launched for several
#     ranks stops naming its TODO); check-step says the solution is not here and still names the
#     open TODO, and compares step 1 with the result it kept in state 1.
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
fail() { echo "FAIL: $*"; exit 1; }
# Under DDPW_TEST_TREES when scripts/test gives one: there the compiler cache serves the main build's
# objects (same paths relative to the cache's base folder), so only the configure and links cost.
tmp=$(mktemp -d "${DDPW_TEST_TREES:-/tmp}/ddpw-handout.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/course
mkdir -p "$tree"
# The clone: tracked and new files, not the build outputs.
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$root" ls-files -z --cached --others --exclude-standard | tar -C "$root" --null -T - -cf - | tar -C "$tree" -xf -
else
  tar -C "$root" --exclude='./build*' --exclude=./out -cf - . | tar -C "$tree" -xf -
fi
export DDPW_BUILD=$tree/build
start=$SECONDS

# ---- 1. with solutions/: a learner who finished step 1
cp "$tree/solutions/step1_multigpu_fork/main.cpp" "$tree/step1_multigpu_fork/main.cpp"
rc=0
"$tree/scripts/check-step" 1 >"$tmp/done1.log" 2>&1 || rc=$?
tail -n 5 "$tmp/done1.log"
[ "$rc" = 0 ] || { cat "$tmp/done1.log"; fail "check-step 1 on a finished step 1 exited $rc"; }
grep -qE "^step 1: DONE \(2 ranks, equal weights, checksum [0-9.]+ = the solution's\)" "$tmp/done1.log" || fail "no DONE line"
built=$(find "$DDPW_BUILD/bin" -type f -perm -u+x -printf '%P\n' | sort | tr '\n' ' ')
[ "$built" = "solutions/step1_multigpu_fork step1_multigpu_fork " ] ||
  fail "check-step 1 built more than step 1's exercise and solution: $built"
echo "state 1: configure + build of the library and step 1's two programs + the check: $((SECONDS - start)) s"

# ---- 2. the handout: no solutions/, step 1 as shipped
rm -rf "$tree/solutions"
cp "$root/step1_multigpu_fork/main.cpp" "$tree/step1_multigpu_fork/main.cpp"
cmake -S "$tree" -B "$DDPW_BUILD" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "the configure without solutions/ failed"; }
grep -q "solutions/ is not here: building the exercises only (no solution targets, no tests)" "$tmp/configure.log" ||
  { cat "$tmp/configure.log"; fail "the configure does not say that solutions/ is missing"; }
grep -qE "^ +solutions +OFF" "$tmp/configure.log" || fail "the summary does not show solutions OFF"
! grep -q "solution_step" "$DDPW_BUILD/build.ninja" "$DDPW_BUILD/Makefile" 2>/dev/null || fail "solution targets remain"
steps=()
for dir in "$tree"/step*_*/; do steps+=("$(basename "$dir")"); done
cmake --build "$DDPW_BUILD" --parallel "$(nproc)" --target "${steps[@]}" >"$tmp/build.log" 2>&1 ||
  { tail -n 40 "$tmp/build.log"; fail "the steps do not build without solutions/"; }
DDPW_BIN=$DDPW_BUILD/bin bash "$root/tests/integration/exercises_run.sh" ||
  fail "without solutions/ the exercises do not behave as with them"

rc=0
"$tree/scripts/check-step" 2 >"$tmp/open2.log" 2>&1 || rc=$?
cat "$tmp/open2.log"
[ "$rc" = 1 ] || fail "check-step 2 on the shipped exercise without solutions/ exited $rc, not 1"
grep -qE "^step 2: NOT DONE: the program stopped, naming an open TODO: .*TODO\(step2\)" "$tmp/open2.log" || fail "no TODO(step2)"
rc=0
"$tree/scripts/check-step" 1 >"$tmp/open1.log" 2>&1 || rc=$?
cat "$tmp/open1.log"
[ "$rc" = 1 ] || fail "check-step 1 on the shipped exercise without solutions/ exited $rc, not 1"
grep -q "solutions/step1_multigpu_fork is not here: comparing with the solution's result kept in" "$tmp/open1.log" ||
  fail "check-step 1 did not compare with the solution's result kept in state 1"
grep -qE "^step 1: NOT DONE: the exercise ran as 1 rank, the solution as 2: TODO\(step1\)" "$tmp/open1.log" || fail "no TODO(step1)"
echo "PASS: a copy without solutions/ configures, builds the six steps, its exercises name their TODOs as with solutions/, and check-step still works ($((SECONDS - start)) s)"
