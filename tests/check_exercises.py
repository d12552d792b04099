#!/usr/bin/env python3
"""Every exercise differs from its solution only inside TODO(stepN) blocks, and by little.

A TODO(stepN) block is a comment that starts with `TODO(stepN)` (N = the step), its
continuation comment lines, and the code right below it, up to the first blank line or the end
of the enclosing block (the first line indented less than the TODO comment), whichever comes
first. Both files keep the TODO comments, so `diff -u stepN_x/main.cpp solutions/stepN_x/main.cpp`
shows only the answers. Reported per step: changed lines (removed + added; the target is at most
MAX_CHANGED_LINES) and the length of `diff -u`, which adds headers and context lines.
"""
import difflib
import pathlib
import re
import shutil
import subprocess
import sys

MAX_CHANGED_LINES = 60  # target from the course design: a diff a learner reads in one sitting


def indentation(line):
    return len(line) - len(line.lstrip())


def todo_lines(lines, step):
    """Indices of lines inside a TODO(step) block."""
    marked, indent = set(), None  # indent: the open block's TODO comment indentation
    todo = re.compile(r"//\s*TODO\(" + step + r"\)")  # a comment that starts with it, not a mention
    for i, line in enumerate(lines):
        if todo.search(line):
            indent = indentation(line)
        elif indent is not None and (not line.strip() or indentation(line) < indent):
            indent = None
        if indent is not None:
            marked.add(i)
    return marked


def diff_u_lines(exercise_path, solution_path, exercise, solution):
    """Lines of `diff -u` between the two files (difflib's version where diff is missing)."""
    if shutil.which("diff"):
        out = subprocess.run(["diff", "-u", str(exercise_path), str(solution_path)],
                             capture_output=True, text=True, check=False).stdout
        return len(out.splitlines())
    return len(list(difflib.unified_diff(exercise, solution, lineterm="")))


def check(root, folder):
    step = re.match(r"(step\d+)", folder).group(1)
    exercise_path, solution_path = root / folder / "main.cpp", root / "solutions" / folder / "main.cpp"
    exercise, solution = exercise_path.read_text().splitlines(), solution_path.read_text().splitlines()
    in_ex, in_sol = todo_lines(exercise, step), todo_lines(solution, step)
    problems, changed = [], 0
    matcher = difflib.SequenceMatcher(a=exercise, b=solution, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        changed += (a1 - a0) + (b1 - b0)
        for i in range(a0, a1):
            if i not in in_ex:
                problems.append(f"{folder}/main.cpp:{i + 1}: changed outside a TODO({step}) block: {exercise[i].strip()}")
        for j in range(b0, b1):
            if j not in in_sol:
                problems.append(f"solutions/{folder}/main.cpp:{j + 1}: changed outside a TODO({step}) block: {solution[j].strip()}")
    if not in_ex:
        problems.append(f"{folder}/main.cpp has no TODO({step}) block")
    if changed == 0:
        problems.append(f"{folder}: the exercise equals its solution")
    if changed > MAX_CHANGED_LINES:
        problems.append(f"{folder}: {changed} changed lines, more than the target of {MAX_CHANGED_LINES}")
    counts = (f"{changed} changed lines (target <= {MAX_CHANGED_LINES}), "
              f"{diff_u_lines(exercise_path, solution_path, exercise, solution)} lines of diff -u")
    print(f"{folder}: {'FAILED' if problems else 'ok'}: {counts}"
          + ("" if problems else f"; all inside TODO({step}) blocks"))
    return problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    folders = sorted(p.parent.name for p in (root / "solutions").glob("step*/main.cpp"))
    if not folders:
        print("no solutions found")
        return 1
    problems = [p for f in folders for p in check(root, f)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
