#!/usr/bin/env bash
# lint.shellcheck: every shell script of the project passes shellcheck (settings and the reasons
# for the two checks turned off: the root's .shellcheckrc). Exit 77 (skipped) without shellcheck.
set -euo pipefail
root=${DDPW_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/shell_scripts.sh"
if ! command -v shellcheck >/dev/null; then
  echo "SKIPPED: shellcheck not found (apt-get install shellcheck; scripts/setup.sh does)"
  exit 77
fi
mapfile -t scripts < <(ddpw_shell_scripts "$root")
[ "${#scripts[@]}" -gt 0 ] || { echo "FAIL: no shell scripts found under $root"; exit 1; }
cd "$root"
# In batches, one per core: shellcheck reads a script and what it sources on one core.
if printf '%s\0' "${scripts[@]}" | xargs -0 -n 25 -P "$(nproc)" shellcheck --format=gcc; then
  echo "ok: ${#scripts[@]} shell scripts pass $(shellcheck --version | sed -n 's/^version: /shellcheck /p')"
else
  echo "FAIL: shellcheck findings above (fix them; a '# shellcheck disable=SCxxxx' needs a reason comment)"
  exit 1
fi
