#!/usr/bin/env python3
"""Every exercise differs from its solution only inside TODO(stepN) blocks, and by little.

A TODO block is a comment line containing `TODO(stepN)` (N = the step), its continuation comment
lines, and the code below it up to the next blank line. Both files keep the TODO comments, so
`diff -u stepN_x/main.cpp solutions/stepN_x/main.cpp` shows only the answers.
"""
import difflib
import pathlib
import re
import sys

MAX_CHANGED_LINES = 60  # target from the course design: a diff a learner reads in one sitting


def todo_lines(lines, step):
    """Indices of lines inside a TODO(step) block."""
    inside, marked = False, set()
    for i, line in enumerate(lines):
        if f"TODO({step})" in line:
            inside = True
        elif not line.strip():
            inside = False
        if inside:
            marked.add(i)
    return marked


def check(root, folder):
    step = re.match(r"(step\d+)", folder).group(1)
    exercise = (root / folder / "main.cpp").read_text().splitlines()
    solution = (root / "solutions" / folder / "main.cpp").read_text().splitlines()
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
        problems.append(f"{folder}: {changed} changed lines, more than {MAX_CHANGED_LINES}")
    print(f"{folder}: {changed} changed lines, all inside TODO({step}) blocks" if not problems else f"{folder}: FAILED")
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
