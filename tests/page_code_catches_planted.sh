#!/usr/bin/env bash
# docs.page_code_catches_planted: the pages' code check catches a page whose code is wrong. On a
# planted page, tests/page_code.py's output compiles and runs when the snippets are right, and fails
# naming the page's line when one is wrong; a C++ block that is neither form is refused. The
# snippets use only ddp/error.h (no LibTorch), so each compile takes a second, not fifteen.
#   page_code_catches_planted.sh CXX        (DDPW_ROOT: the project; DDPW_BUILD_DIR: its build)
set -euo pipefail
cxx=${1:?usage: page_code_catches_planted.sh CXX}
root=${DDPW_ROOT:?DDPW_ROOT must point at the project}
build=${DDPW_BUILD_DIR:?DDPW_BUILD_DIR must be the build folder}
work=$(mktemp -d /tmp/ddpw-page-planted.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
start=$(date +%s)

# $1: the fragment's statement (line 4 of the page), $2: the program's (line 13).
page() {
  cat >"$work/planted.md" <<PAGE
# A planted page

\`\`\`cpp fragment
$1
\`\`\`

\`\`\`cpp
#include <cstdio>

#include "ddp/error.h"

int main() {
  $2
  return 0;
}
\`\`\`
PAGE
}
generate() { python3 "$root/tests/page_code.py" --root "$work" --out "$work/page_examples.cpp" planted.md; }
compile() { "$cxx" -std=c++20 -Wall -Werror -I"$root" -I"$build/include" "$@" "$work/page_examples.cpp" 2>"$work/cxx.log"; }

# Right: compiles, links (the header alone) and runs the program by its PAGE:LINE.
page 'ddp::Error e("disk full", "free some space"); (void)e.what();' \
     'std::puts(ddp::Error("disk full", "free some space").what());'
generate || fail "the generator refused a right page"
compile -o "$work/page_examples" || { cat "$work/cxx.log" >&2; fail "a right page's code did not compile"; }
[ "$("$work/page_examples" --list)" = "planted.md:7" ] || fail "--list did not name planted.md:7: $("$work/page_examples" --list)"
out=$("$work/page_examples" planted.md:7) || fail "the planted program did not exit 0"
[ "$out" = "disk full (fix: free some space)" ] || fail "the planted program printed '$out'"

# Wrong: a fragment that calls what the library lacks fails, naming the page's line.
page 'ddp::Error e("disk full"); e.fix();' 'std::puts("x");'
generate || fail "the generator refused a page with a wrong fragment (the compiler is to catch it)"
! compile -fsyntax-only || fail "a fragment calling ddp::Error::fix(), which does not exist, compiled"
grep -q 'planted.md:4' "$work/cxx.log" || { cat "$work/cxx.log" >&2; fail "the error does not name planted.md:4"; }

# Wrong: the same in a complete program.
page 'ddp::Error e("disk full");' 'ddp::Error e("disk full"); std::puts(e.fix());'
generate || fail "the generator refused a page with a wrong program"
! compile -fsyntax-only || fail "a program calling ddp::Error::fix() compiled"
grep -q 'planted.md:13' "$work/cxx.log" || { cat "$work/cxx.log" >&2; fail "the error does not name planted.md:13"; }

# Neither form: a misspelt info string, and a ```cpp block without main, are refused by name.
page 'int unused = 0;' 'std::puts("x");'
sed -i 's/cpp fragment$/cpp fragmnet/' "$work/planted.md"
! generate 2>"$work/gen.log" || fail "the generator took a \`\`\`cpp fragmnet block"
grep -q 'planted.md:3' "$work/gen.log" || { cat "$work/gen.log" >&2; fail "the refusal does not name planted.md:3"; }
page 'int unused = 0;' 'std::puts("x");'
sed -i 's/^int main() {$/int start() {/' "$work/planted.md"
! generate 2>"$work/gen.log" || fail "the generator took a \`\`\`cpp block without int main()"
grep -q 'planted.md:7.*needs int main' "$work/gen.log" || { cat "$work/gen.log" >&2; fail "the refusal does not say why"; }
echo "PASS: right snippets compile and run; a wrong fragment and a wrong program fail naming their page line;" \
     "a block of neither form is refused; $(( $(date +%s) - start )) s"
