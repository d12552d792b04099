#!/usr/bin/env bash
# Runs a command and checks how it ended, for CTest (whose PASS_REGULAR_EXPRESSION ignores the exit
# code and takes only one pattern):
#   expect.sh --exit CODE --within SECONDS [--needs PROGRAM]... [-e REGEX]... -- COMMAND [ARGS...]
# Passes when COMMAND exits with CODE within SECONDS and its output (stdout and stderr) matches
# every REGEX (grep -E, line by line). On failure prints why, then the output.
# Every @PORT@ in COMMAND and the REGEXes becomes a loopback port nobody listens on now: no test
# has a fixed port, so two test runs on one machine never meet. Without a PROGRAM --needs names on
# PATH, the test is skipped: exit 77 (CTest's SKIP_RETURN_CODE in diagnostics/tests.cmake).
set -euo pipefail

want_exit=0 within=60 patterns=() needs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --exit) want_exit="$2"; shift 2 ;;
    --within) within="$2"; shift 2 ;;
    --needs) needs+=("$2"); shift 2 ;;
    -e) patterns+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "expect.sh: unknown argument '$1' (usage: expect.sh --exit N --within S [--needs P]... [-e REGEX]... -- COMMAND...)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "expect.sh: no command given after --" >&2; exit 2; }
for program in "${needs[@]}"; do
  command -v "$program" >/dev/null || { echo "expect.sh: skipped: this test needs $program, not found on PATH"; exit 77; }
done

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
argv=("${@//@PORT@/$port}")
patterns=("${patterns[@]//@PORT@/$port}")

output=$(mktemp)
trap 'rm -f "$output"' EXIT
start=$SECONDS
set +e
timeout --kill-after=5 "$within" "${argv[@]}" >"$output" 2>&1
got_exit=$?
set -e
elapsed=$((SECONDS - start))

failures=()
if [[ $got_exit -eq 124 || $got_exit -eq 137 ]]; then
  failures+=("did not finish within ${within} s (killed)")
elif [[ $got_exit -ne $want_exit ]]; then
  failures+=("exit code $got_exit, expected $want_exit")
fi
for pattern in "${patterns[@]}"; do
  grep -Eq -- "$pattern" "$output" || failures+=("no line matches: $pattern")
done

if [[ ${#failures[@]} -eq 0 ]]; then
  cat "$output"
  echo "expect.sh: passed (exit $got_exit after ${elapsed} s)"
  exit 0
fi
printf 'expect.sh: FAILED: %s\n' "${failures[@]}"
echo "expect.sh: command: ${argv[*]}"
echo "----- output -----"
cat "$output"
exit 1
