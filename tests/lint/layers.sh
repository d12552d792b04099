#!/usr/bin/env bash
# lint.layers: the library (ddp/) knows nothing of the course (course/): none of its files includes
# course/, names the course's namespace (ddpw::), its command line (CLI11, Options, parse_options),
# an exercise (TODO(stepN)) or the course's set-up (scripts/setup.sh, clusters/<site>: a library
# user has neither; the course adds such hints where it catches the error). ARCHITECTURE.md says
# where a new thing goes. And the build's switches (DDPW_HAVE_CUDA, DDPW_HAVE_NCCL, ...) come from
# the generated ddp/config.h, not from the compiler's command line: a file that tests one without
# including it would silently compile its GPU code out.
# The checks first prove that they catch a planted violation of each kind.
set -euo pipefail
root=${DDPW_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}

# violations DIR: one line per offending line of DIR's files, "file:line: what"; none: no output.
violations() {
  local dir=$1
  # "Options" alone: the course's command-line struct (ProcessGroupGloo::Options and DdpOptions are
  # other names).
  grep -rnPH --include='*.h' --include='*.cpp' --include='*.in' \
    '#\s*include\s*[<"]course/|\bddpw::|\bCLI(/|::)|(?<![\w:])Options\b|\bparse_options\b|TODO\(step|scripts/setup\.sh|\bclusters/' \
    "$dir" || true
  # The build: no target of the course, no CLI11. (ddpw:: is the package's namespace there.)
  grep -rnPH --include='CMakeLists.txt' '^[^#]*(\bddpw_(cli|course)\b|\bCLI11\b|course/)' "$dir" || true
}

# unconfigured DIR...: files that use a switch of ddp/config.h without including it.
unconfigured() {
  grep -rlE --include='*.h' --include='*.cpp' '\bDDPW_(HAVE_[A-Z]+|TORCH_VERSION|VERSION)\b' "$@" |
    xargs -r grep -L '#include "ddp/config.h"' || true
}

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
planted=('planted.h:#include "course/options.h"' 'planted.h:ddpw::Options o;' 'planted.h:#include <CLI/CLI.hpp>'
         'planted.h:void f(const Options&);' 'planted.h:auto o = parse_options(argc, argv, 0);'
         'planted.h:// complete TODO(step4) first' 'planted.cpp:  hint = "run scripts/setup.sh";'
         'planted.cpp:  hint = "see clusters/<site>/README.md";' 'CMakeLists.txt:target_link_libraries(ddp PRIVATE ddpw_cli)')
for plant in "${planted[@]}"; do
  rm -f "$probe"/*
  printf '%s\n' "${plant#*:}" > "$probe/${plant%%:*}"
  if [ -z "$(violations "$probe")" ]; then
    echo "FAIL: the check misses a planted violation: $plant"
    exit 1
  fi
done

printf '#ifdef DDPW_HAVE_CUDA\n#endif\n' > "$probe/planted.h"
if [ -z "$(unconfigured "$probe")" ]; then
  echo "FAIL: the check misses a file that tests DDPW_HAVE_CUDA without ddp/config.h"
  exit 1
fi

found=$(violations "$root/ddp")
if [ -n "$found" ]; then
  echo "$found"
  echo "FAIL: the library (ddp/) refers to the course above. Fix: move that code to course/ (namespace ddpw), or" \
       "give the library a plain setting the course fills in (ARCHITECTURE.md, \"Two layers\")."
  exit 1
fi
dirs=()
for d in ddp course tests diagnostics bench examples; do [ -d "$root/$d" ] && dirs+=("$root/$d"); done
found=$(unconfigured "${dirs[@]}")
if [ -n "$found" ]; then
  echo "$found"
  echo "FAIL: these files test a DDPW_* switch without #include \"ddp/config.h\" (the switches are not compile" \
       "definitions: without it the test is always false). Fix: include ddp/config.h"
  exit 1
fi
echo "ok: nothing in ddp/ includes course/ or names the course's command line, namespace or exercises;" \
     "every file that tests a DDPW_* switch includes ddp/config.h"
