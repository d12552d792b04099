#!/usr/bin/env bash
# The sites' clusters/<site>/env.sh under Environment Modules (Tcl: Princeton's module tool), as
# tests/slurm/test-modules.sh does it under Lmod on a login node: module trees that mirror each
# site's SOURCES.md (tests/slurm/site-modulefiles.sh, as Tcl modulefiles), `module` the Tcl
# modulecmd's own shell function. A major alone is left for clusters/modules.sh to resolve
# (MODULES_EXTENDED_DEFAULT=0, Environment Modules 4's default), as where a site switched it off:
#   1. every site: each role loads its first choice (SuperCloud's env.sh sources /etc/profile,
#      which sets up this machine's Lmod: it is Lmod's test's);
#   2. Della: its two CUDA 12 versions gone, `cudatoolkit/12` loads the newest 12.x `module avail`
#      lists (12.6 of 12.4 and 12.6) and says so; with extended_default on, the tool's own choice;
#   3. Della: no CUDA 12 toolkit left: env.sh stops with what `module avail` offers (Environment
#      Modules has no `module spider`) and the fix, and the shell that sourced it stays open.
# Environment Modules comes unpacked from Debian's package (scripts/setup.sh: it conflicts with lmod).
set -euo pipefail
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
fail() { echo "FAIL: $*"; exit 1; }
em_dir=${DDPW_ENV_MODULES_DIR:-/opt/ddp-workshop/environment-modules}
modulecmd=$(find "$em_dir" -path '*-linux-gnu*' -name modulecmd.tcl -print -quit 2>/dev/null || true)
[ -n "$modulecmd" ] || modulecmd=$(find "$em_dir" -name modulecmd.tcl -print -quit 2>/dev/null || true)
[ -n "$modulecmd" ] || fail "Environment Modules is not unpacked in $em_dir (scripts/setup.sh unpacks it: apt-get download environment-modules; dpkg-deb -x)"
command -v tclsh8.6 >/dev/null || fail "tclsh8.6 is missing (apt-get install tcl8.6; scripts/setup.sh installs it)"

tmp=$(mktemp -d /tmp/ddpw-tcl-modules.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/venv/bin"
ln -s "$(command -v python3)" "$tmp/venv/bin/python3"   # what ddpw_venv looks for
export DDPW_ROOT=$root DDPW_TEST_MODULE_FORMAT=tcl
# shellcheck source=tests/slurm/site-modulefiles.sh
source "$root/tests/slurm/site-modulefiles.sh"

# in_site SITE EXTENDED_DEFAULT [CHANGE...]: a fresh shell with Environment Modules and SITE's tree
# sources env.sh as a learner does on a login node; sets OUT.
in_site() {
  local site=$1 extended=$2 tree
  shift 2
  tree=$(mktemp -d "$tmp/tree.XXXXXX")
  site_modulefiles "$tree" "$tmp/venv/bin" "$site" "$@"
  # shellcheck disable=SC2016  # expanded by the inner shell
  # The tool's own `module` (autoinit), the tree as a site's initrc puts it (what `module reset`
  # returns to: Delta's and Roihu's env.sh start with it).
  OUT=$(env -i HOME="$HOME" PATH=/usr/local/bin:/usr/bin:/bin __MODULES_LMINIT="module use --append $tree" \
    MODULEPATH="$tree" MODULES_EXTENDED_DEFAULT="$extended" DDPW_VENV="$tmp/venv" bash -c '
    eval "$(tclsh8.6 "$3" bash autoinit)"
    cd "$1" && source "clusters/$2/env.sh" && echo "env.sh loaded"
    echo "shell still open"' _ "$root" "$site" "$modulecmd" 2>&1)
}
declare -A site_name=([delta]=Delta [della]=Della [hipergator]=HiPerGator [puhti]=Puhti [roihu]=Roihu)

for site in delta della hipergator puhti roihu; do
  in_site "$site" 0
  grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "$site: env.sh did not load under Environment Modules"; }
  ! grep -q "is not at ${site_name[$site]}" <<< "$OUT" || { echo "$OUT"; fail "$site: a first choice was not found"; }
  echo "ok: $site: every role loads its first choice under Environment Modules"
done

in_site della 0 'cudatoolkit/12.9' 'cudatoolkit/12.8' +cudatoolkit/12.4 +cudatoolkit/12.6
grep -qxF "ddpw: CUDA toolkit: cudatoolkit/12.6 (cudatoolkit/12); the first choice, cudatoolkit/12.9, is not at Della" <<< "$OUT" ||
  { echo "$OUT"; fail "della: cudatoolkit/12 did not load the newest 12.x (12.6) where the tool does not resolve a major"; }
in_site della 1 'cudatoolkit/12.9' 'cudatoolkit/12.8' +cudatoolkit/12.4 +cudatoolkit/12.6
grep -qxF "ddpw: CUDA toolkit: cudatoolkit/12.6 (cudatoolkit/12); the first choice, cudatoolkit/12.9, is not at Della" <<< "$OUT" ||
  { echo "$OUT"; fail "della: cudatoolkit/12 with extended_default on did not load 12.6"; }
echo "ok: della: cudatoolkit/12 loads the newest 12.x, resolved by env.sh or by the tool"

in_site della 0 'cudatoolkit/12*'
want="ddpw: error: no CUDA toolkit module loaded: Della has none of cudatoolkit/12.9 cudatoolkit/12.8 cudatoolkit/12 (names the course could not confirm for Della); \`module avail cudatoolkit\` offers: cudatoolkit/11.7 (fix: module avail cudatoolkit lists the versions Della has"
grep -qF -- "$want" <<< "$OUT" || { echo "$OUT"; fail "della: no message with what module avail offers and the fix"; }
grep -q "ERROR: Unable to locate a modulefile for 'cudatoolkit/12.9'" <<< "$OUT" || { echo "$OUT"; fail "della: Environment Modules' own message is missing"; }
! grep -qx "env.sh loaded" <<< "$OUT" || { echo "$OUT"; fail "della: env.sh went on without a CUDA toolkit"; }
grep -qx "shell still open" <<< "$OUT" || { echo "$OUT"; fail "della: a failed module closed the shell that sourced env.sh"; }
echo "ok: della: no CUDA 12 toolkit left: env.sh stops with what module avail offers and the fix; the shell stays open"
echo "PASS: the sites' env.sh under Environment Modules (Tcl): first choices, a major alone resolved to the newest, and the stop with what module avail offers"
