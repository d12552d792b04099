#!/usr/bin/env bash
# README command 1 on a fresh machine: scripts/course sources env.sh, then setup.sh creates the venv
# that brings torchrun, then step 2 calls torchrun. env.sh must put the venv on PATH even though it
# does not exist yet when sourced (it once did so only for an existing venv: "torchrun: command not
# found" on the first run, never on the second).
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
home=$(mktemp -d /tmp/ddpw-envtest.XXXXXX)
trap 'rm -rf "$home"' EXIT

# shellcheck disable=SC2016  # the inner shell expands its own variables, in a bare environment
out=$(env -i HOME="$home" DDPW_HOME="$home/ddpw" PATH=/usr/bin:/bin bash -c '
  set -euo pipefail
  source "$1/scripts/env.sh"
  command -v torchrun >/dev/null && { echo "SKIP: a torchrun outside the venv is on PATH: $(command -v torchrun)"; exit 77; }
  # what setup.sh does on a fresh machine: create the venv, with torchrun in it
  mkdir -p "$DDPW_HOME/venv/bin"
  printf "#!/bin/sh\necho torchrun from the new venv\n" >"$DDPW_HOME/venv/bin/torchrun"
  chmod +x "$DDPW_HOME/venv/bin/torchrun"
  torchrun
  # sourcing it again (build.sh does) must not add the folder twice
  source "$1/scripts/env.sh"
  echo "venv folders on PATH: $(tr : "\n" <<<"$PATH" | grep -cx "$DDPW_HOME/venv/bin")"
' bash "$root" 2>&1) || rc=$?
if [ "${rc:-0}" -eq 77 ]; then echo "$out"; exit 77; fi
[ "${rc:-0}" -eq 0 ] || { echo "$out"; echo "FAIL: torchrun of a venv created after sourcing env.sh was not found"; exit 1; }
echo "$out"
grep -qx "torchrun from the new venv" <<<"$out" || { echo "FAIL: the venv's torchrun did not run"; exit 1; }
grep -qx "venv folders on PATH: 1" <<<"$out" || { echo "FAIL: env.sh put the venv on PATH more than once"; exit 1; }
echo "PASS: env.sh finds the set-up's torchrun created after it was sourced"
