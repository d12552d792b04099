# shellcheck shell=bash
# defines: ddpw_load — one line per module in a site's env.sh, saying when it is needed and whether
#          the course could confirm its name; ddpw_toolkit, the CUDA toolkit module of the torch
#          build's CUDA major; ddpw_venv, the set-up's torch venv; sourced by every clusters/<site>/env.sh.
#
#   ddpw_load build NAME [unconfirmed]   compiler, CMake, CUDA toolkit: only when you build
#   ddpw_load run NAME [unconfirmed]     what the jobs need too (a launcher: torchrun, mpirun)
#   ddpw_load job NAME [unconfirmed]     in jobs only (a network plugin for NCCL between nodes: the
#                                        build needs none, and its libraries must not meet the configure)
#   ddpw_toolkit NAME12 NAME13           prints the toolkit module for DDPW_TORCH_CUDA (cu126/cu128:
#                                        NAME12, cu130: NAME13): nvcc's major must be LibTorch's
#   ddpw_venv                            $DDPW_HOME/venv (scripts/setup.sh) first on PATH: its torch
#                                        gives CMake LibTorch, and the jobs torchrun
#
# When you build (source clusters/<site>/env.sh on a login node or in an interactive session) every
# line loads; a module that does not load stops env.sh there (return 1, your shell stays open) with
# a message that names it and how to find the right name. A batch job (DDPW_MODULES=run, set by
# clusters/common.sh) loads only the "run" lines: a build module a site renamed cannot stop it, and
# an unconfirmed run module that does not load is a warning, not the end of the job.

# ddpw_purge: `module purge`, if this shell has modules at all (a clean start: the job does not
# inherit what was loaded in the shell that submitted it). ddpw_reset: `module reset` instead (the
# site's default modules), where the site's staff start their job scripts so.
ddpw_purge() { _ddpw_module_start purge; }
ddpw_reset() { _ddpw_module_start reset; }
_ddpw_module_start() {
  declare -F module >/dev/null || command -v module >/dev/null || return 0
  module "$1" || echo "ddpw: warning: module $1 failed; going on with the modules already loaded" >&2
}

# ddpw_toolkit NAME12 NAME13: the CUDA toolkit module whose major is that of the torch build the
# site's env.sh chose (DDPW_TORCH_CUDA): two CUDA majors in one program is what CMake's check
# (cmake/CudaStack.cmake) stops the configure for.
ddpw_toolkit() {
  case ${DDPW_TORCH_CUDA:-} in
    cu12*) echo "${1:?ddpw_toolkit NAME12 NAME13}" ;;
    cu13*) echo "${2:?ddpw_toolkit NAME12 NAME13}" ;;
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
  if [ ! -x "$venv/bin/python3" ]; then
    echo "ddpw: error: no torch venv in $venv (fix: make it once on a login node, with the torch build for $site's GPUs: DDPW_HOME=$home DDPW_TORCH_CUDA=${DDPW_TORCH_CUDA:-<build>} DDPW_TORCH_INDEX_URL=<PyTorch's index for it> scripts/setup.sh, as clusters/<site>/README.md shows; or export DDPW_HOME where you made it)" >&2
    return 1
  fi
  case ":$PATH:" in *":$venv/bin:"*) ;; *) PATH=$venv/bin:$PATH ;; esac
  export PATH DDPW_HOME=$home
}

ddpw_load() {
  local when=${1:?ddpw_load build|run|job NAME [unconfirmed]} name=${2:?ddpw_load build|run|job NAME [unconfirmed]}
  local confirmed=yes
  [ "${3:-}" = unconfirmed ] && confirmed=no
  local site=${DDPW_SITE_NAME:-this site} file=${DDPW_ENV_FILE:-clusters/<site>/env.sh}
  if [ "${DDPW_MODULES:-all}" = run ] && [ "$when" = build ]; then return 0; fi
  if [ "${DDPW_MODULES:-all}" != run ] && [ "$when" = job ]; then return 0; fi
  if ! declare -F module >/dev/null && ! command -v module >/dev/null; then
    echo "ddpw: error: there is no \`module\` command in this shell, so '$name' cannot be loaded (fix: source /etc/profile, or log in again with a login shell)" >&2
    return 1
  fi
  if module load "$name"; then return 0; fi
  local fix="find the name $site uses with \`module spider ${name%%/*}\` (or \`module avail ${name%%/*}\`), then fix $file or point DDPW_SITE_ENV at your own copy"
  if [ "$confirmed" = no ] && [ "${DDPW_MODULES:-all}" = run ]; then
    echo "ddpw: warning: module '$name' did not load (a name the course could not confirm for $site); the job goes on without it. If it then fails to start a program (e.g. \"GLIBCXX_... not found\"), $fix" >&2
    return 0
  fi
  local note=""
  [ "$confirmed" = no ] && note=" (a name the course could not confirm for $site)"
  echo "ddpw: error: module '$name' did not load$note (fix: $fix)" >&2
  return 1
}
