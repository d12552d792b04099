#!/usr/bin/env bash
# lint.format: the C++ files match .clang-format (scripts/format --check lists the ones that drift;
# scripts/format fixes them). Exit 77 (skipped) without clang-format 14: the style was tuned with
# Debian 12's clang-format 14, and another major version formats some lines differently.
set -euo pipefail
root=${DDPW_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
clang_format=${CLANG_FORMAT:-}
if [ -z "$clang_format" ]; then
  for candidate in clang-format-14 clang-format; do
    if command -v "$candidate" >/dev/null; then clang_format=$candidate; break; fi
  done
fi
if [ -z "$clang_format" ]; then
  echo "SKIPPED: clang-format not found (apt-get install clang-format; scripts/setup.sh does)"
  exit 77
fi
version=$("$clang_format" --version)
if ! [[ "$version" =~ version\ 14\. ]]; then
  echo "SKIPPED: $version is not clang-format 14, the version .clang-format was tuned with (set CLANG_FORMAT)"
  exit 77
fi
CLANG_FORMAT=$clang_format "$root/scripts/format" --check
