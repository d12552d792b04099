# shellcheck shell=bash
# defines: ddpw_role — one line per role in a site's env.sh (CUDA toolkit, PyTorch, compiler, MPI, ...):
#          the site's documented module names for it, in order of preference, of which the first the
#          site has is loaded; when it is needed; whether the course could confirm the names.
#          ddpw_load, the same for one name; ddpw_toolkit, the CUDA toolkit names of the torch build's
#          CUDA major; ddpw_venv, the set-up's torch venv. Sourced by every clusters/<site>/env.sh.
#
#   ddpw_role build ROLE [unconfirmed] NAME...  compiler, CMake, CUDA toolkit: only when you build
#   ddpw_role run ROLE [unconfirmed] NAME...    what the jobs need too (a launcher: torchrun, mpirun)
#   ddpw_role job ROLE [unconfirmed] NAME...    in jobs only (a network plugin for NCCL between nodes: the
#                                               build needs none, and its libraries must not meet the configure)
#   ddpw_load WHEN NAME [unconfirmed]           ddpw_role WHEN NAME's family [unconfirmed] NAME
#   ddpw_toolkit "NAMES12" "NAMES13"            prints the toolkit names for DDPW_TORCH_CUDA (cu126/cu128:
#                                               NAMES12, cu130: NAMES13): nvcc's major must be LibTorch's
#   ddpw_venv                                   $DDPW_HOME/venv (scripts/setup.sh) first on PATH: its torch
#                                               gives CMake LibTorch, and the jobs torchrun
#
# Module versions change every few months: each role names the versions clusters/<site>/SOURCES.md
# gives a source for, newest documented first, and may end with a major alone (`cuda/12`: the
# newest 12.x) or the bare name (the site's default version). The first one `module is-avail` finds
# is loaded, and env.sh says which ("ddpw: CUDA toolkit: cuda/12.9.1").
# Two module tools: Lmod, and Environment Modules (Tcl; Princeton's). Lmod resolves a major alone
# itself (its "extended default"), as Environment Modules 5 does by default; where the tool does not
# (Environment Modules 4, or extended_default off), the newest of that major that `module -t avail`
# lists is loaded. Where the site has none of them, env.sh stops there (return 1, your shell stays
# open) and prints what the site offers for that role (Lmod: `module spider`; Environment Modules,
# which has no spider: `module avail`) and how to fix the list.
# When you build (source clusters/<site>/env.sh on a login node or in an interactive session) the
# "build" and "run" lines load; scripts/site-check (DDPW_MODULES=check) loads all three kinds and
# takes a torch venv not made yet as a note. A batch job (DDPW_MODULES=run, set by
# clusters/common.sh) loads only the "run" and "job" lines: a build module a site renamed cannot stop it, and an unconfirmed run role of which
# nothing loads is a warning, not the end of the job.

# ddpw_purge: `module purge`, if this shell has modules at all (a clean start: the job does not
# inherit what was loaded in the shell that submitted it). ddpw_reset: `module reset` instead (the
# site's default modules), where the site's staff start their job scripts so.
ddpw_purge() { _ddpw_module_start purge; }
ddpw_reset() { _ddpw_module_start reset; }
_ddpw_module_start() {
  declare -F module >/dev/null || command -v module >/dev/null || return 0
  module "$1" || echo "ddpw: warning: module $1 failed; going on with the modules already loaded" >&2
}

# ddpw_toolkit "NAMES12" "NAMES13": the CUDA toolkit modules (each a list, in order of preference)
# whose major is that of the torch build the site's env.sh chose (DDPW_TORCH_CUDA): two CUDA majors
# in one program is what CMake's check (cmake/CudaStack.cmake) stops the configure for.
ddpw_toolkit() {
  case ${DDPW_TORCH_CUDA:-} in
    cu12*) echo "${1?ddpw_toolkit NAMES12 NAMES13}" ;;
    cu13*) echo "${2?ddpw_toolkit NAMES12 NAMES13}" ;;
    *) echo "ddpw: error: DDPW_TORCH_CUDA='${DDPW_TORCH_CUDA:-}' is not a torch build (fix: cu126, cu128 or cu130, as ${DDPW_ENV_FILE:-env.sh} says)" >&2
       return 1 ;;
  esac
}

# ddpw_venv: the torch venv that scripts/setup.sh made ($DDPW_VENV, default $DDPW_HOME/venv) first on
# PATH. Its python3 gives CMake LibTorch; its torchrun starts step 2 in the jobs (sbatch passes
# DDPW_HOME on); the programs find LibTorch by their RPATH.
ddpw_venv() {
  local home=${DDPW_HOME:-$HOME/.cache/ddp-workshop}
  local venv=${DDPW_VENV:-$home/venv} site=${DDPW_SITE_NAME:-this site}
  if [ ! -x "$venv/bin/python3" ] && [ "${DDPW_MODULES:-all}" = check ]; then
    echo "ddpw: torch venv: none yet in $venv (scripts/setup.sh makes it: clusters/<site>/README.md)"
    return 0
  fi
  if [ ! -x "$venv/bin/python3" ]; then
    echo "ddpw: error: no torch venv in $venv (fix: make it once on a login node, with the torch build for $site's GPUs: DDPW_HOME=$home DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-<build>} DDPW_TORCH_INDEX_URL=<PyTorch's index for it> scripts/setup.sh, as clusters/<site>/README.md shows; or export DDPW_HOME where you made it)" >&2
    return 1
  fi
  case ":$PATH:" in *":$venv/bin:"*) ;; *) PATH=$venv/bin:$PATH ;; esac
  export PATH DDPW_HOME=$home
}

# ddpw_load WHEN NAME [unconfirmed]: one name, its family (the part before the /) as the role.
ddpw_load() {
  local when=${1:?ddpw_load build|run|job NAME [unconfirmed]} name=${2:?ddpw_load build|run|job NAME [unconfirmed]}
  ddpw_role "$when" "${name%%/*}" ${3:+"$3"} "$name"
}

# _ddpw_newest_of_major FAMILY/MAJOR: the newest FAMILY/MAJOR.x that `module -t avail FAMILY` lists
# (nothing, status 1, for a NAME that is not a major alone or has no such version).
_ddpw_newest_of_major() {
  local family=${1%%/*} major=${1#*/}
  case $1 in */*) ;; *) return 1 ;; esac
  case $major in '' | *[!0-9]*) return 1 ;; esac
  local newest
  newest=$(module -t avail "$family" 2>&1 | grep -oE "^$family/$major\.[^[:space:]():]+" | sort -V | tail -n 1)
  [ -n "$newest" ] && echo "$newest"
}

# ddpw_role WHEN ROLE [unconfirmed] NAME...: each NAME argument may hold several names (a list from
# ddpw_toolkit); the first the site has is loaded.
ddpw_role() {
  local usage="ddpw_role build|run|job ROLE [unconfirmed] NAME..."
  local when=${1:?$usage} role=${2:?$usage}
  shift 2
  local confirmed=yes
  if [ "${1:-}" = unconfirmed ]; then confirmed=no; shift; fi
  local -a names=() words=()
  local word
  for word in "$@"; do read -r -a words <<< "$word"; names+=(${words[@]+"${words[@]}"}); done
  [ ${#names[@]} -gt 0 ] || { echo "ddpw: error: $usage: no NAME given for $role" >&2; return 1; }
  local site=${DDPW_SITE_NAME:-this site} file=${DDPW_ENV_FILE:-clusters/<site>/env.sh}
  if [ "${DDPW_MODULES:-all}" = run ] && [ "$when" = build ]; then return 0; fi
  if [ "${DDPW_MODULES:-all}" = all ] && [ "$when" = job ]; then return 0; fi
  if ! declare -F module >/dev/null && ! command -v module >/dev/null; then
    echo "ddpw: error: there is no \`module\` command in this shell, so the $role module (${names[*]}) cannot be loaded (fix: source /etc/profile, or log in again with a login shell)" >&2
    return 1
  fi
  local name chosen="" load=""
  for name in "${names[@]}"; do
    if module is-avail "$name" >/dev/null 2>&1; then chosen=$name load=$name; break; fi
    # A major alone the module tool does not resolve: the newest of it the tool lists.
    load=$(_ddpw_newest_of_major "$name") && [ -n "$load" ] && { chosen=$name; break; }
    load=""
  done
  # None available, or a module system without `is-avail`: the first choice, whose failure prints
  # the module system's own message.
  [ -n "$chosen" ] || chosen=${names[0]} load=${names[0]}
  if module load "$load"; then
    # The version loaded (a major alone or a bare name loads the site's choice): the tool lists it.
    local loaded=$load m
    for m in ${LOADEDMODULES//:/ }; do
      case $m in "$load"/* | "$load".*) loaded=$m ;; esac
    done
    [ "$loaded" = "$chosen" ] || loaded="$loaded ($chosen)"
    if [ "$chosen" = "${names[0]}" ]; then
      echo "ddpw: $role: $loaded"
    else
      echo "ddpw: $role: $loaded; the first choice, ${names[0]}, is not at $site"
    fi
    return 0
  fi
  # What the site has for this role: `module spider` (Lmod) or `module avail` (Environment Modules,
  # which has no spider) of each family the names belong to.
  local -a families=()
  local family offers="" line lister=spider
  [ -n "${LMOD_CMD:-}" ] || lister=avail
  for name in "${names[@]}"; do
    family=${name%%/*}
    case " ${families[*]-} " in *" $family "*) ;; *) families+=("$family") ;; esac
  done
  for family in "${families[@]}"; do
    # One version a line (terse), or, for Lmod's single version, a paragraph that names it.
    while read -r line; do
      case " $offers " in *" $line "*) ;; *) offers+=" $line" ;; esac
    done < <(module -t "$lister" "$family" 2>&1 | grep -oE "(^|[[:space:]])$family/[^[:space:],:\"()]+" | tr -d ' \t' || true)
  done
  local tried="${names[*]}" where="module $lister ${families[*]}"
  local fix="$where lists the versions $site has: put the one to use first in the $role line of $file, with its source in ${file%env.sh}SOURCES.md (or point DDPW_SITE_ENV at your own copy)"
  local found="\`$where\` offers:${offers:- nothing}"
  if [ "$confirmed" = no ] && [ "${DDPW_MODULES:-all}" = run ]; then
    echo "ddpw: warning: no $role module loaded ($tried: names the course could not confirm for $site; $found); the job goes on without it. If it then fails to start a program (e.g. \"GLIBCXX_... not found\"), $fix" >&2
    return 0
  fi
  local note=""
  [ "$confirmed" = no ] && note=" (names the course could not confirm for $site)"
  echo "ddpw: error: no $role module loaded: $site has none of $tried$note; $found (fix: $fix)" >&2
  return 1
}
