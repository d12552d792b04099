#!/usr/bin/env bash
# lint.layers: the library (ddp/) knows nothing of the course (course/): none of its files includes
# course/, names the course's namespace (ddpw::), its command line (CLI11, Options, parse_options)
# or an exercise (TODO(stepN)). ARCHITECTURE.md says where a new thing goes. The check first proves
# that it catches a planted violation of each kind.
set -euo pipefail
root=${DDPW_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}

# violations DIR: one line per offending line of DIR's files, "file:line: what"; none: no output.
violations() {
  local dir=$1
  # "Options" alone: the course's command-line struct (ProcessGroupGloo::Options and DdpOptions are
  # other names).
  grep -rnPH --include='*.h' --include='*.cpp' --include='*.in' --include='CMakeLists.txt' \
    '#\s*include\s*[<"]course/|\bddpw::|\bCLI(/|::)|(?<![\w:])Options\b|\bparse_options\b|TODO\(step' "$dir" || true
}

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
planted=('#include "course/options.h"' 'ddpw::Options o;' '#include <CLI/CLI.hpp>' 'void f(const Options&);'
         'auto o = parse_options(argc, argv, 0);' '// complete TODO(step4) first')
for line in "${planted[@]}"; do
  printf '%s\n' "$line" > "$probe/planted.h"
  if [ -z "$(violations "$probe")" ]; then
    echo "FAIL: the check misses a planted violation: $line"
    exit 1
  fi
done

found=$(violations "$root/ddp")
if [ -n "$found" ]; then
  echo "$found"
  echo "FAIL: the library (ddp/) refers to the course above. Fix: move that code to course/ (namespace ddpw), or" \
       "give the library a plain setting the course fills in (ARCHITECTURE.md, \"Two layers\")."
  exit 1
fi
echo "ok: nothing in ddp/ includes course/ or names the course's command line, namespace or exercises"
