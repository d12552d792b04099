# defines: module — a stand-in for the sites' `module` command (Lmod/Environment Modules) for the
#          learners of test-workshop.sh and for test-site-check-libtorch.sh, sourced and exported, so that the sites' real
#          clusters/<site>/env.sh run unchanged (test-modules.sh uses Debian's real Lmod):
#            module purge, reset     do nothing (and `conda activate ...` neither)
#            module is-avail NAME    fails for a NAME listed in DDPW_FAKE_MODULES_MISSING, as Lmod's
#            module load NAME...     fails as Lmod does for a NAME listed in DDPW_FAKE_MODULES_MISSING;
#                                    pytorch*/anaconda*/python* put the test's torch (DDPW_TEST_TORCH_BIN) on
#                                    PATH, as those modules would; anything else loads nothing
# shellcheck shell=bash
module() {
  local command=${1:-} name
  shift || true
  case $command in
    purge|reset) return 0 ;;
    is-avail)
      case " ${DDPW_FAKE_MODULES_MISSING:-} " in *" ${1:-} "*) return 1 ;; esac
      return 0 ;;
    load)
      for name in "$@"; do
        case " ${DDPW_FAKE_MODULES_MISSING:-} " in
          *" $name "*)
            echo "Lmod has detected the following error: The following module(s) are unknown: \"$name\"" >&2
            return 1 ;;
        esac
        case $name in
          pytorch*|anaconda*|python*) [ -z "${DDPW_TEST_TORCH_BIN:-}" ] || PATH=$DDPW_TEST_TORCH_BIN:$PATH ;;
        esac
      done
      export PATH
      return 0 ;;
    *) echo "module (test stand-in): '$command' is not supported" >&2; return 1 ;;
  esac
}
export -f module
# Della's env.sh activates the learner's conda environment when building (not in jobs).
conda() { return 0; }
export -f conda
