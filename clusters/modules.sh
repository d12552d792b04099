# shellcheck shell=bash
# defines: ddpw_load — one line per module in a site's env.sh, saying when it is needed and whether
#          the course could confirm its name; sourced by every clusters/<site>/env.sh.
#
#   ddpw_load build NAME [unconfirmed]   compiler, CMake, CUDA toolkit: only when you build
#   ddpw_load run NAME [unconfirmed]     what the jobs need too (a launcher: torchrun, mpirun)
#
# When you build (source clusters/<site>/env.sh on a login node or in an interactive session) every
# line loads; a module that does not load stops env.sh there (return 1, your shell stays open) with
# a message that names it and how to find the right name. A batch job (DDPW_MODULES=run, set by
# clusters/common.sh) loads only the "run" lines: a build module a site renamed cannot stop it, and
# an unconfirmed run module that does not load is a warning, not the end of the job.

# ddpw_purge: `module purge`, if this shell has modules at all (a clean start: the job does not
# inherit what was loaded in the shell that submitted it).
ddpw_purge() {
  declare -F module >/dev/null || command -v module >/dev/null || return 0
  module purge || echo "ddpw: warning: module purge failed; going on with the modules already loaded" >&2
}

ddpw_load() {
  local when=${1:?ddpw_load build|run NAME [unconfirmed]} name=${2:?ddpw_load build|run NAME [unconfirmed]}
  local confirmed=yes
  [ "${3:-}" = unconfirmed ] && confirmed=no
  local site=${DDPW_SITE_NAME:-this site} file=${DDPW_ENV_FILE:-clusters/<site>/env.sh}
  if [ "${DDPW_MODULES:-all}" = run ] && [ "$when" = build ]; then return 0; fi
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
