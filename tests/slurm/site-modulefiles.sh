# shellcheck shell=bash
# defines: site_modulefiles DIR VENV_BIN [MISSING...] — a module tree for Debian's Lmod that mirrors
#          the names and versions the sites' clusters/<site>/env.sh load (sourced by the tests):
#   CUDA toolkits (one family, as at the sites: loading one swaps the other out). Those of CUDA 13
#     put this machine's toolkit (/usr/local/cuda, or DDPW_TEST_CUDA_HOME) on PATH; those of CUDA 12
#     have no nvcc here and only say their version (DDPW_TEST_TOOLKIT). An unversioned `cuda` or
#     `cudatoolkit` gets a CUDA 11 default, as Puhti's did: a line without a version shows.
#   Pythons and torches (anaconda3, pytorch-conda, python, pytorch...): VENV_BIN first on PATH.
#   The rest (compilers, CMake, MPI, the NCCL network plugin): nothing but their name in
#     LOADEDMODULES (and DDPW_TEST_JOB_MODULE for the plugin).
# No NCCL module is made: an env.sh that loads one fails. Names in MISSING are left out, as a site
# without them; `module reset` loads LMOD_SYSTEM_DEFAULT_MODULES (Delta's defaults: its CUDA 12.8
# toolkit), which the caller exports.
site_modulefiles() {
  local dir=${1:?site_modulefiles DIR VENV_BIN [MISSING...]} venv_bin=${2:?site_modulefiles DIR VENV_BIN [MISSING...]}
  shift 2
  local missing=" $* " cuda_home=${DDPW_TEST_CUDA_HOME:-/usr/local/cuda} name version
  mkdir -p "$dir"
  _modulefile() {  # _modulefile NAME LUA...: DIR/NAME.lua, unless NAME is missing
    case $missing in *" $1 "*) return 0 ;; esac
    mkdir -p "$dir/$(dirname "$1")"
    local body=$1; shift
    printf '%s\n' "$@" > "$dir/$body.lua"
  }
  for name in cuda/13.0 cudatoolkit/13.0 cudatoolkit/25.9_13.0; do
    _modulefile "$name" 'family("cuda")' "prepend_path(\"PATH\", \"$cuda_home/bin\")" \
      "setenv(\"CUDA_HOME\", \"$cuda_home\")" "setenv(\"DDPW_TEST_TOOLKIT\", \"13.0\")"
  done
  for name in cuda/12.2 cuda/12.6.0 cuda/12.8 cuda/12.8.1 cudatoolkit/12.8 cudatoolkit/25.3_12.8 cuda/11.7.0 cudatoolkit/11.7; do
    version=${name#*/}
    version=${version#*_}   # cudatoolkit/25.3_12.8: NVIDIA HPC SDK 25.3, CUDA 12.8
    _modulefile "$name" 'family("cuda")' "setenv(\"DDPW_TEST_TOOLKIT\", \"$version\")"
  done
  printf 'module_version("cuda/11.7.0", "default")\n' > "$dir/cuda/.modulerc.lua"
  printf 'module_version("cudatoolkit/11.7", "default")\n' > "$dir/cudatoolkit/.modulerc.lua"
  for name in anaconda3/2025.12 pytorch-conda/2.12 python/3.12 pytorch/2.5 pytorch/2.10 anaconda/Python-ML-2025a; do
    _modulefile "$name" "prepend_path(\"PATH\", \"$venv_bin\")"
  done
  for name in mpi/openmpi-4.1.5 gcc/14.2.0 gcc/11.3.0 gcc/12 gcc-toolset/12 cmake/3.25; do
    _modulefile "$name" "-- $name: nothing to set here"
  done
  _modulefile aws-ofi-nccl/1.14.2 'setenv("DDPW_TEST_JOB_MODULE", "aws-ofi-nccl")'
  unset -f _modulefile
}
