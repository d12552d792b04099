# shellcheck shell=bash
# defines: site_modules SITE — the module names clusters/SITE/SOURCES.md lists (its "Modules" table),
#          one a line: the names the site's pages (or, marked unconfirmed there, its users' scripts)
#          give, not those env.sh asks for; a name that env.sh asks for and the table lacks is
#          therefore missing from the mirror, as at a site that never had it.
#          site_modulefiles DIR VENV_BIN SITE [CHANGE...] — a module tree for Debian's Lmod that
#          mirrors those names (sourced by the tests). A CHANGE is a name or a glob (`cuda/*`) to
#          leave out, as at a site that dropped it, +NAME to add, as at a site that added it, or
#          "!NAME" for a module that is there (`module avail` lists it) but refuses to load, as
#          Delta's pytorch-conda/2.12 does on its RH9.4 nodes.
#   A major alone that the table calls "the newest 12.x" (`cuda/12`: Lmod's extended default) is a request
#     Lmod resolves, not a module: it gets no file of its own. A bare name (`cmake`: the site's default
#     version) gets one, NAME/mirror, only when the table gives no version of it.
#   CUDA toolkits (one family, as at the sites: loading one swaps the other out). Those of CUDA 13
#     put this machine's toolkit (/usr/local/cuda, or DDPW_TEST_CUDA_HOME) on PATH; the others have
#     no nvcc here and only say their version (DDPW_TEST_TOOLKIT). The tree adds one module of its
#     own, a CUDA 11 default (`cuda/11.7.0`, `cudatoolkit/11.7`), as Puhti's was: a toolkit line
#     without a version shows.
#   Pythons and torches (anaconda*, pytorch*, python*): VENV_BIN first on PATH. Delta's
#     pytorch-conda/2.12 also loads aws-ofi-nccl/1.19.2 where the table has it, as NCSA's does.
#   The rest (compilers, CMake, MPI, the NCCL network plugin): nothing but their name in
#     LOADEDMODULES (and DDPW_TEST_JOB_MODULE for the plugin).
# DDPW_TEST_MODULE_FORMAT=tcl writes the same tree for Environment Modules (Tcl modulefiles and
# .modulerc), as at Princeton.
# No NCCL module is made: an env.sh that loads one fails. `module reset` loads
# LMOD_SYSTEM_DEFAULT_MODULES (Delta's defaults: its CUDA 12.8 toolkit), which the caller exports.
site_modules() {
  local site=${1:?site_modules SITE [requests]} root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
  local file=$root/clusters/$site/SOURCES.md
  [ -f "$file" ] || { echo "site_modules: $file not found" >&2; return 1; }
  # The value column (2nd) of the rows under "## Modules": every backticked word that is a name.
  # With "requests": only the rows whose fact says "the newest N.x" (a major alone, for Lmod to resolve).
  # shellcheck disable=SC2016  # backticks, not an expansion
  awk -F'|' -v want="${2:-names}" '/^## /{ modules = ($0 ~ /^## Modules/) }
    modules && /^\|/ && NF > 3 && (want != "requests" || $2 ~ /the newest [0-9]+\.x/) { print $3 }' "$file" |
    grep -oE '`[A-Za-z][A-Za-z0-9._+-]*(/[A-Za-z0-9._+-]+)?`' | tr -d '`' | sort -u
}

# _ddpw_tcl_line LUA: one line of the mirror's Lua as an Environment Modules (Tcl) command.
_ddpw_tcl_line() {
  local q='"([^"]*)"'
  if [[ $1 =~ ^family\($q\)$ ]]; then echo "family ${BASH_REMATCH[1]}"
  elif [[ $1 =~ ^prepend_path\($q,\ $q\)$ ]]; then echo "prepend-path ${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
  elif [[ $1 =~ ^setenv\($q,\ $q\)$ ]]; then echo "setenv ${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
  elif [[ $1 =~ ^load\($q\)$ ]]; then echo "module load ${BASH_REMATCH[1]}"
  elif [[ $1 =~ ^LmodError\($q\)$ ]]; then echo "error {${BASH_REMATCH[1]}}"
  elif [[ $1 =~ ^--\ (.*)$ ]]; then echo "# ${BASH_REMATCH[1]}"
  else echo "_ddpw_tcl_line: no Tcl for: $1" >&2; return 1
  fi
}

site_modulefiles() {
  local usage="site_modulefiles DIR VENV_BIN SITE [CHANGE...]"
  local dir=${1:?$usage} venv_bin=${2:?$usage} site=${3:?$usage}
  shift 3
  local cuda_home=${DDPW_TEST_CUDA_HOME:-/usr/local/cuda} name version change
  local -a names=() leave_out=() requests=() refuse=()
  mapfile -t names < <(site_modules "$site") || return 1
  mapfile -t requests < <(site_modules "$site" requests) || return 1
  [ ${#names[@]} -gt 0 ] || { echo "site_modulefiles: no module names in clusters/$site/SOURCES.md" >&2; return 1; }
  for change in "$@"; do
    case $change in +*) names+=("${change#+}") ;; !*) refuse+=("${change#!}") ;; *) leave_out+=("$change") ;; esac
  done
  mkdir -p "$dir"
  _ddpw_mirror_file() {  # _ddpw_mirror_file NAME LUA...: DIR/NAME.lua, or DIR/NAME in Tcl
    mkdir -p "$dir/$(dirname "$1")"
    if [ "${DDPW_TEST_MODULE_FORMAT:-lua}" = tcl ]; then
      local path=$dir/$1 line; shift
      { echo '#%Module'; for line in "$@"; do _ddpw_tcl_line "$line"; done; } > "$path"
      return
    fi
    local path=$dir/$1.lua; shift
    printf '%s\n' "$@" > "$path"
  }
  local -a made=()
  for name in "${names[@]}" cuda/11.7.0 cudatoolkit/11.7; do
    for change in ${leave_out[@]+"${leave_out[@]}"}; do
      # shellcheck disable=SC2254  # a glob on purpose
      case $name in $change) continue 2 ;; esac
    done
    # "the newest 12.x" (cuda/12): a request Lmod resolves (its extended default), not a module
    case " ${requests[*]-} " in *" $name "*) continue ;; esac
    case $name in
      */*) ;;
      *) # a bare name: a file only if the table has no version of it
         printf '%s\n' "${names[@]}" | grep -q "^$name/" && continue
         name=$name/mirror ;;
    esac
    made+=("$name")
    case " ${refuse[*]-} " in
      *" $name "*) _ddpw_mirror_file "$name" "LmodError(\"$name refuses to load on this node (a test's stand-in)\")"
                   continue ;;
    esac
    case $name in
      cuda/* | cudatoolkit/*)
        version=${name#*/}
        version=${version#*_}   # cudatoolkit/25.3_12.8: NVIDIA HPC SDK 25.3, CUDA 12.8
        if [ "${version%%.*}" = 13 ]; then
          _ddpw_mirror_file "$name" 'family("cuda")' "prepend_path(\"PATH\", \"$cuda_home/bin\")" \
            "setenv(\"CUDA_HOME\", \"$cuda_home\")" "setenv(\"DDPW_TEST_TOOLKIT\", \"$version\")"
        else
          _ddpw_mirror_file "$name" 'family("cuda")' "setenv(\"DDPW_TEST_TOOLKIT\", \"$version\")"
        fi ;;
      pytorch-conda/2.12)
        if printf '%s\n' "${names[@]}" | grep -qx 'aws-ofi-nccl/1.19.2'; then
          _ddpw_mirror_file "$name" "prepend_path(\"PATH\", \"$venv_bin\")" 'load("aws-ofi-nccl/1.19.2")'
        else
          _ddpw_mirror_file "$name" "prepend_path(\"PATH\", \"$venv_bin\")"
        fi ;;
      anaconda* | pytorch* | python*) _ddpw_mirror_file "$name" "prepend_path(\"PATH\", \"$venv_bin\")" ;;
      aws-ofi-nccl/*) _ddpw_mirror_file "$name" 'setenv("DDPW_TEST_JOB_MODULE", "aws-ofi-nccl")' ;;
      *) _ddpw_mirror_file "$name" "-- $name: nothing to set here" ;;
    esac
  done
  if [ "${DDPW_TEST_MODULE_FORMAT:-lua}" = tcl ]; then
    [ ! -f "$dir/cuda/11.7.0" ] || printf '#%%Module\nmodule-version cuda/11.7.0 default\n' > "$dir/cuda/.modulerc"
    [ ! -f "$dir/cudatoolkit/11.7" ] || printf '#%%Module\nmodule-version cudatoolkit/11.7 default\n' > "$dir/cudatoolkit/.modulerc"
  else
    [ ! -f "$dir/cuda/11.7.0.lua" ] || printf 'module_version("cuda/11.7.0", "default")\n' > "$dir/cuda/.modulerc.lua"
    [ ! -f "$dir/cudatoolkit/11.7.lua" ] || printf 'module_version("cudatoolkit/11.7", "default")\n' > "$dir/cudatoolkit/.modulerc.lua"
  fi
  unset -f _ddpw_mirror_file
}
