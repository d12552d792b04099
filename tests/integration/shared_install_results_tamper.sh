#!/usr/bin/env bash
# defines: shared_install_results_tamper.sh — a room of non-root learners on one shared install, and
#          solution results no learner can alter (issue 36, items 2 and 3). Root is the instructor;
#          two Unix users made here (removed on any exit) are the learners.
#  1. the instructor's `scripts/setup.sh --shared DIR`, from a PATH whose first python3 is a link in a
#     folder closed to others (as root's pyenv shim is): the venv runs the system's python3, every file
#     is readable by all, the user nobody imported torch from it, and it prints `export DDPW_HOME=DIR`.
#     Torch comes from the set-up's uv cache, offline (no download: hard links, seconds);
#  2. each learner's `scripts/setup.sh --first` with that DDPW_HOME installs nothing (the folder is the
#     same before and after) and names the shared torch; a learner's configure of a handed-out copy
#     finds LibTorch there; the configure's error tells "no venv" from "a venv you cannot run" and
#     names the folder the learner cannot enter, and the set-up says the same; a learner's own
#     install first says its size (about 4.7 GB) and where it goes;
#  3. `scripts/progress --prepare` (the instructor) writes step 1's solution result into the progress
#     folder, read-only to learners; a learner without solutions/ whose step 1 is done reaches DONE
#     against it; another cannot rewrite it; where a learner got to write one anyway (their own
#     .solutions/ in the open progress folder), every learner's check stops with an error naming
#     its owner (exit 2), never a DONE for an exercise that is not done; a new --prepare repairs it.
# The learners run programs of this build (DDPW_BIN) whose LibTorch lies in root's set-up; they load
# the same LibTorch from the shared install (LD_LIBRARY_PATH: the same files, hard links of one cache).
set -euo pipefail
ROOT=${DDPW_ROOT:?DDPW_ROOT must point at the project}
BIN=${DDPW_BIN:?DDPW_BIN must point at build/bin}
PATH=$PATH:/usr/sbin:/sbin   # useradd, runuser
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (it makes two learners' Unix users)"
for tool in useradd userdel runuser; do command -v "$tool" >/dev/null || skip "no $tool"; done
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || skip "Debian's python3 has no venv module (apt-get install python3-venv)"
SOURCE_HOME=${DDPW_HOME:-$HOME/.cache/ddp-workshop}
[ -x "$SOURCE_HOME/venv/bin/uv" ] && [ -d "$SOURCE_HOME/uv-cache" ] ||
  skip "no uv and uv cache in $SOURCE_HOME (the set-up installed torch with pip): nothing to make the shared install from offline"
for p in step1_multigpu_fork solutions/step1_multigpu_fork; do
  [ -x "$BIN/$p" ] || fail "$BIN/$p is not built: cmake --build build --target ${p##*/}"
done
started=$SECONDS

# ---- the learners' users: listed from the moment they exist, removed on any exit (and by the next
# run, if a killed one could not)
USERS_LIST=/run/ddpw-room-test.users
while read -r user pid; do
  if [ -n "${user:-}" ] && ! kill -0 "$pid" 2>/dev/null && id "$user" >/dev/null 2>&1; then
    userdel --force --remove "$user" >/dev/null 2>&1 || echo "warning: could not remove $user, left by a killed run" >&2
  fi
done < <(cat "$USERS_LIST" 2>/dev/null || true)
tmp=$(mktemp -d /tmp/ddpw-room.XXXXXX)
users=()
cleanup() {
  local rc=$? user
  set +e
  for user in ${users[@]+"${users[@]}"}; do userdel --force --remove "$user" >/dev/null 2>&1 || userdel --force "$user"; done
  [ ! -f "$USERS_LIST" ] || sed -i "/ $$\$/d" "$USERS_LIST"
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
chmod 755 "$tmp"
mkdir -m 755 "$tmp/home"
a=ddpwroom$$a b=ddpwroom$$b
for user in "$a" "$b"; do
  id "$user" >/dev/null 2>&1 && fail "user $user exists already: not one this test made"
  echo "$user $$" >> "$USERS_LIST"
  users+=("$user")
  useradd --create-home --home-dir "$tmp/home/$user" --shell /bin/bash --user-group "$user" || fail "useradd $user failed"
done

# as USER COMMAND...: the command as that learner, in a bare environment (no root's PATH or venv).
as() {
  local user=$1; shift
  (cd / && runuser -u "$user" -- env -i HOME="$tmp/home/$user" USER="$user" LOGNAME="$user" PATH=/usr/bin:/bin \
     CUDA_VISIBLE_DEVICES= "$@")
}
# expect LOG WANT_RC RC TEXT...: the exit code, and each text (fixed strings) in the log.
expect() {
  local log=$1 want=$2 rc=$3 text; shift 3
  [ "$rc" = "$want" ] || { cat "$log"; fail "$(basename "$log"): exit code $rc, expected $want"; }
  for text in "$@"; do grep -qF -- "$text" "$log" || { cat "$log"; fail "$(basename "$log") lacks: $text"; }; done
}
state() { find "$1" -printf '%p %s %m %U %T@\n' | sort | sha256sum; }

# ---- 1. the instructor's shared install -------------------------------------------------------
shared=$tmp/shared
mkdir -m 700 "$tmp/root-home"   # root's home: closed to others, with a python3 first on root's PATH
mkdir "$tmp/root-home/bin" "$tmp/tools"
ln -s /usr/bin/python3 "$tmp/root-home/bin/python3"
ln -s "$SOURCE_HOME/venv/bin/uv" "$tmp/tools/uv"
rc=0
env -i HOME="$tmp/root-home" PATH="$tmp/root-home/bin:$tmp/tools:/usr/local/bin:/usr/bin:/bin" \
  UV_CACHE_DIR="$SOURCE_HOME/uv-cache" UV_OFFLINE=1 bash "$ROOT/scripts/setup.sh" --shared "$shared" \
  >"$tmp/shared.log" 2>&1 || rc=$?
expect "$tmp/shared.log" 0 "$rc" "export DDPW_HOME=$shared" "checked: the user nobody imports torch"
python=$(readlink -f "$shared/venv/bin/python3")
[ "$python" = "$(readlink -f /usr/bin/python3)" ] ||
  { cat "$tmp/shared.log"; fail "the shared venv runs $python, not the system's python3 (root's PATH had $tmp/root-home/bin/python3 first)"; }
closed=$(find "$shared" \( ! -perm -o+r -o \( -type d ! -perm -o+x \) \) -print -quit)
[ -z "$closed" ] || fail "the shared install is not readable by all: $closed ($(stat -c %a "$closed"))"
echo "ok ($((SECONDS - started)) s): setup.sh --shared: the system's python3, readable by all, the learners' line printed"

# ---- 2. the learners' set-up and configure ----------------------------------------------------
before=$(state "$shared")
for user in "$a" "$b"; do
  rc=0; as "$user" DDPW_HOME="$shared" bash "$ROOT/scripts/setup.sh" --first >"$tmp/setup-$user.log" 2>&1 || rc=$?
  expect "$tmp/setup-$user.log" 0 "$rc" "in the shared install $shared/venv (installing nothing)"
done
[ "$(state "$shared")" = "$before" ] || fail "a learner's set-up changed the shared install"
echo "ok ($((SECONDS - started)) s): both learners' set-ups use the shared install and change nothing in it"

# The copy learners get: tracked files, without solutions/ (an instructor may keep them back).
handout=$tmp/handout
mkdir -m 755 "$handout"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard | grep -zv '^solutions/' |
  tar -C "$ROOT" --null -T - -cf - | tar -C "$handout" -xf -
chmod -R a+rX "$handout"
rc=0; as "$a" DDPW_HOME="$shared" cmake -S "$handout" -B "$tmp/home/$a/build" -G Ninja >"$tmp/configure-a.log" 2>&1 || rc=$?
shared_torch=$("$shared/venv/bin/python3" -c 'import torch; print(torch.__version__.split("+")[0])')
expect "$tmp/configure-a.log" 0 "$rc" "LibTorch      $shared_torch" "(the set-up's torch in $shared/venv;"
torch_dir=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$tmp/home/$a/build/CMakeCache.txt")
case $torch_dir in "$shared"/*) ;; *) fail "learner a's build takes LibTorch from $torch_dir, not the shared install" ;; esac

# A shared install made the old way: its venv's python3 a link into root's closed home.
mkdir -p "$tmp/broken/venv/bin"
ln -s "$tmp/root-home/bin/python3" "$tmp/broken/venv/bin/python3"
chmod -R a+rX "$tmp/broken"
rc=0; as "$b" DDPW_HOME="$tmp/broken" cmake -S "$handout" -B "$tmp/home/$b/broken-build" >"$tmp/configure-broken.log" 2>&1 || rc=$?
expect "$tmp/configure-broken.log" 1 "$rc" "cannot serve you" \
  "its python3 is a link to $tmp/root-home/bin/python3, behind $tmp/root-home (owner root, mode 700), a folder you ($b) cannot enter" \
  "scripts/setup.sh --shared $tmp/broken"
rc=0; as "$b" DDPW_HOME="$tmp/nothing" cmake -S "$handout" -B "$tmp/home/$b/none-build" >"$tmp/configure-none.log" 2>&1 || rc=$?
expect "$tmp/configure-none.log" 1 "$rc" "the set-up's venv $tmp/nothing/venv (there is none" \
  "export DDPW_HOME=<the folder your instructor names>"
! grep -q "cannot serve you" "$tmp/configure-none.log" || fail "no venv at all, yet the configure says one cannot serve"
rc=0; as "$b" DDPW_HOME="$tmp/broken" bash "$ROOT/scripts/setup.sh" --first >"$tmp/setup-broken.log" 2>&1 || rc=$?
expect "$tmp/setup-broken.log" 1 "$rc" "behind $tmp/root-home (owner root, mode 700), a folder you ($b) cannot enter" \
  "your instructor makes it again with scripts/setup.sh --shared $tmp/broken"
# A learner's own install (no index reachable: it stops at the download, after saying what it is).
rc=0; as "$b" DDPW_HOME="$tmp/home/$b/ddpw" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 UV_OFFLINE=1 \
  bash "$ROOT/scripts/setup.sh" --first >"$tmp/setup-own.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || { cat "$tmp/setup-own.log"; fail "an install with no index reachable succeeded"; }
expect "$tmp/setup-own.log" "$rc" "$rc" "into $tmp/home/$b/ddpw/venv (once; later runs reuse it): about 4.7 GB" "free there" \
  "scripts/setup.sh --shared DIR"
echo "ok ($((SECONDS - started)) s): a learner's configure finds the shared LibTorch; a broken shared venv, none, and a download each say so"

# ---- 3. the solution's results in the progress folder -----------------------------------------
progress=$tmp/progress
mkdir -m 1777 "$progress"   # the instructor's, open to all learners' lines
torch_lib=$(dirname "$(dirname "$(dirname "$torch_dir")")")/lib   # <torch>/share/cmake/Torch -> <torch>/lib
# A build of the instructor's and of each learner's: step 1's programs, and a configure's Torch_DIR
# (check-step keys a result by its LibTorch): learner a's real one, the others that line of it.
make_build() {  # make_build FOLDER OWNER EXERCISE_PROGRAM
  mkdir -p "$1/bin/solutions"
  [ -f "$1/CMakeCache.txt" ] || echo "Torch_DIR:PATH=$torch_dir" >"$1/CMakeCache.txt"
  cp "$3" "$1/bin/step1_multigpu_fork"
  chown -R "$2:$2" "$1"
}
make_build "$tmp/instructor-build" root "$BIN/step1_multigpu_fork"
cp "$BIN/solutions/step1_multigpu_fork" "$tmp/instructor-build/bin/solutions/"
make_build "$tmp/home/$a/build" "$a" "$BIN/solutions/step1_multigpu_fork"   # a's step 1 is done
make_build "$tmp/home/$b/build" "$b" "$BIN/step1_multigpu_fork"             # b's is as shipped
learner_check() {  # learner_check USER NAME: step 1 in the handout, without solutions/, into the progress folder
  as "$1" DDPW_HOME="$shared" DDPW_BUILD="$tmp/home/$1/build" LD_LIBRARY_PATH="$torch_lib" \
    timeout 300 "$handout/scripts/check-step" 1 --no-build --progress "$progress" >"$tmp/$2.log" 2>&1
}

rc=0; env -i HOME="$tmp/root-home" PATH=/usr/bin:/bin CUDA_VISIBLE_DEVICES= DDPW_BUILD="$tmp/instructor-build" \
  timeout 300 "$ROOT/scripts/progress" --prepare "$progress" 1 --no-build >"$tmp/prepare.log" 2>&1 || rc=$?
expect "$tmp/prepare.log" 0 "$rc" "step 1: the solution's result (the solution, run now: 2 ranks"
result=$(find "$progress/.solutions" -name 'step1.*.json')
[ "$(stat -c '%U %a' "$progress/.solutions") $(stat -c '%U %a' "$result")" = "root 755 root 644" ] ||
  fail "the results are not the instructor's, read-only to others: $(ls -la "$progress/.solutions")"
rc=0; learner_check "$a" a-done || rc=$?
expect "$tmp/a-done.log" 0 "$rc" "left in the progress folder by your instructor" "step 1: DONE (2 ranks, equal weights"
rc=0; learner_check "$b" b-shipped || rc=$?
expect "$tmp/b-shipped.log" 1 "$rc" "step 1: NOT DONE: the exercise ran as 1 rank, the solution as 2"
echo "ok ($((SECONDS - started)) s): --prepare wrote step 1's result (root, 644); a's done step is DONE, b's shipped one NOT DONE"

# Learner b rewrites the instructor's result: the system refuses, and it stays the same.
sum=$(sha256sum <"$result")
as "$b" sh -c "printf '{}' >'$result'" 2>/dev/null && fail "learner b rewrote the instructor's result"
as "$b" rm -f "$result" 2>/dev/null && fail "learner b removed the instructor's result"
as "$b" mv "$progress/.solutions" "$progress/.mine" 2>/dev/null && fail "learner b moved the results folder away"
[ "$(sha256sum <"$result")" = "$sum" ] || fail "the instructor's result changed"
# Where learner b got to write one (a progress folder whose .solutions/ b made first, as any learner
# could before: here the instructor's is moved aside for it), b's result says b's undone exercise is
# the solution: b's own check and a's stop with an error naming b; no DONE for b.
mv "$progress/.solutions" "$tmp/instructors-results"
as "$b" mkdir -m 755 "$progress/.solutions"
as "$b" env PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 - "$ROOT/scripts/check-step" "$tmp/home/$b/build/check-step/step1.exercise.log" \
  "$progress/.solutions/$(basename "$result")" <<'PY' || fail "learner b could not write a result"
import importlib.machinery, importlib.util, json, os, sys
loader = importlib.machinery.SourceFileLoader("check_step", sys.argv[1])
check_step = importlib.util.module_from_spec(importlib.util.spec_from_loader("check_step", loader))
loader.exec_module(check_step)
run = check_step.Run(open(sys.argv[2]).read(), 0)  # b's own exercise, as if it were the solution
assert run.checksums, "no checksum in b's exercise log"
with open(sys.argv[3], "w") as f:
    json.dump({"program": "forged", "run": run.to_json(), "when": 0}, f)
os.chmod(sys.argv[3], 0o644)
PY
for user in "$b" "$a"; do
  rc=0; learner_check "$user" "forged-$user" || rc=$?
  expect "$tmp/forged-$user.log" 2 "$rc" "check-step: error: the solution's result in the progress folder cannot be trusted:" \
    "belongs to $b, not to the progress folder's owner root" "scripts/progress --prepare $progress"
  ! grep -q "DONE" "$tmp/forged-$user.log" || fail "a check compared with learner b's result: $(grep DONE "$tmp/forged-$user.log")"
done
! grep -qP '\t1\tDONE\t' "$progress/$b.tsv" || fail "learner b's progress shows step 1 DONE"
# The instructor's --prepare moves b's folder aside and writes the result anew; a is DONE again.
rc=0; env -i HOME="$tmp/root-home" PATH=/usr/bin:/bin CUDA_VISIBLE_DEVICES= DDPW_BUILD="$tmp/instructor-build" \
  timeout 300 "$ROOT/scripts/progress" --prepare "$progress" 1 --no-build >"$tmp/prepare2.log" 2>&1 || rc=$?
expect "$tmp/prepare2.log" 0 "$rc" "was not yours: moved aside" "the solution's result kept from an earlier check"
rc=0; learner_check "$a" a-again || rc=$?
expect "$tmp/a-again.log" 0 "$rc" "step 1: DONE (2 ranks, equal weights"
echo "PASS: one shared install for two non-root learners (set-up, configure, their errors); the solution's result only the instructor writes; a forged one is an error, not a DONE; whole test $((SECONDS - started)) s"
