# Sourced by the lint tests: prints every shell script of the project, one per line: *.sh, *.sbatch
# (clusters/*/), .ci/run, and every other file whose first line is a sh/bash shebang (scripts/*,
# bench/build_time). Tracked files when this is a git clone, else every file under the root.
# shellcheck shell=bash
ddpw_shell_scripts() {
  local root=$1 file first
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$root" ls-files --cached --others --exclude-standard  # new files too, before their commit
  else
    (cd "$root" && find . -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||')
  fi | sort | while IFS= read -r file; do
    [ -f "$root/$file" ] || continue
    case "$file" in
      *.sh | *.sbatch | .ci/run) echo "$file" ;;
      *.py | *.cpp | *.h | *.md | *.txt | *.cmake | *.json) ;;
      *)
        IFS= read -r first <"$root/$file" 2>/dev/null || true
        [[ "$first" =~ ^#!.*(/|env\ )(ba)?sh([[:space:]]|$) ]] && echo "$file"
        ;;
    esac
  done
}
