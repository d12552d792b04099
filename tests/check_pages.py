#!/usr/bin/env python3
"""A learner's page gives hints, not answers.

For every step N >= 1 with a solution: the answer lines are the code lines that the solution has
inside its TODO(stepN) blocks and the exercise has nowhere (a code line: not a comment, its
trailing comment dropped, at least MIN_CHARS characters). None of them may appear in the step's
README.md, compared without whitespace and without the `;`, `,`, `{`, `}` at either end, anywhere
on the page (a line wrapped in prose counts too). The page the learner opens afterwards,
stepN_*/AFTER.md, may show them. The TODO blocks are those of check_exercises.py.

    python3 tests/check_pages.py [ROOT]     # exit 1 when a page shows an answer line
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_exercises import todo_lines  # noqa: E402  (one definition of a TODO block)

MIN_CHARS = 12  # shorter lines (`return loss;`, `}`) are not an answer of their own
LEARNER_PAGE = "README.md"


def code_part(line):
    """The line without its trailing // comment (a // inside a string literal stays)."""
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"' and (i == 0 or line[i - 1] != "\\"):
            in_string = not in_string
        elif not in_string and line.startswith("//", i):
            return line[:i]
    return line


def squeeze(text):
    return re.sub(r"\s+", "", text)


def answer_lines(exercise, solution, step):
    """(solution line number, code) of each line the learner has to write."""
    in_exercise = {squeeze(code_part(line)) for line in exercise}
    answers = []
    for i in sorted(todo_lines(solution, step)):
        code = code_part(solution[i]).strip()
        if not code or len(code) < MIN_CHARS:
            continue
        if squeeze(code) in in_exercise:
            continue
        answers.append((i + 1, code))
    return answers


def page_index(text):
    """The page without whitespace, and for each of its characters the page's line number."""
    chars, lines = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        for ch in line:
            if not ch.isspace():
                chars.append(ch)
                lines.append(number)
    return "".join(chars), lines


def check(root, folder):
    step = re.match(r"(step\d+[a-z]?)_", folder).group(1)
    exercise = (root / folder / "main.cpp").read_text().splitlines()
    solution = (root / "solutions" / folder / "main.cpp").read_text().splitlines()
    page_path = root / folder / LEARNER_PAGE
    if not page_path.exists():
        print(f"{folder}/{LEARNER_PAGE}: missing")
        return [f"{folder}/{LEARNER_PAGE} is missing: every step has a learner's page"]
    page, line_of = page_index(page_path.read_text())
    answers = answer_lines(exercise, solution, step)
    problems = []
    if not answers:
        problems.append(f"solutions/{folder}/main.cpp: no answer line found in its TODO({step}) blocks: "
                        f"nothing to check (fix: tests/check_pages.py and check_exercises.py disagree on the blocks)")
    else:  # the check itself: the first answer, indented and spaced otherwise, is found on a page
        planted, _ = page_index("text\n   " + re.sub(r"\s+", "  ", answers[0][1]) + "  \n")
        if squeeze(answers[0][1]).strip(";,{}") not in planted:
            problems.append(f"{folder}: the check misses a planted answer line: {answers[0][1]}")
    shown = 0
    for number, code in answers:
        needle = squeeze(code).strip(";,{}")
        at = page.find(needle) if len(needle) >= MIN_CHARS else -1
        if at >= 0:
            shown += 1
            problems.append(f"{folder}/{LEARNER_PAGE}:{line_of[at]}: shows the answer of "
                            f"solutions/{folder}/main.cpp:{number}: {code}")
    print(f"{folder}/{LEARNER_PAGE}: {'FAILED' if problems else 'ok'}: {shown} of {len(answers)} answer lines "
          f"(code of {MIN_CHARS}+ characters in the solution's TODO({step}) blocks) on the page")
    return problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    folders = sorted((p.parent.name for p in (root / "solutions").glob("step*/main.cpp")),
                     key=lambda name: int(re.match(r"step(\d+)", name).group(1)))
    folders = [f for f in folders if int(re.match(r"step(\d+)", f).group(1)) >= 1]
    if not folders:
        print("no solutions found")
        return 1
    problems = [p for f in folders for p in check(root, f)]
    for p in problems:
        print(p)
    if problems:
        print("fix: give the API as a hint (the function, its header, its signature, the Python line it mirrors) "
              "and move the answer lines to the step's AFTER.md")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
