#!/usr/bin/env python3
"""The exercises and solutions form one chain, checked link by link.

1. Every exercise differs from its solution only inside TODO(stepN) blocks, and by little.
   A TODO(stepN) block is a comment that starts with `TODO(stepN)` (N = the step), its
   continuation comment lines, and the code right below it, up to the first blank line or the end
   of the enclosing block (the first line indented less than the TODO comment), whichever comes
   first. A code line whose trailing comment starts with `TODO(stepN)` opens a block the same way,
   with itself as the first line (a one-line answer without a comment line of its own). Both files keep the TODO comments, so `diff -u stepN_x/main.cpp solutions/stepN_x/main.cpp`
   shows only the answers. Reported per step: changed lines (removed + added; the target is at most
   MAX_CHANGED_LINES) and the length of `diff -u`, which adds headers and context lines.
2. Exercise N is solution N-1 (for N = 1: step 0, the starting program) plus step N's TODO blocks:
   the two differ only in the header comment, the includes, lines inside TODO(stepN) blocks of the
   exercise, and blank lines. So a plumbing edit made in one copy only is caught: change the
   library, or change every copy of the chain in the same way.
3. The chain stops at step 4. Step 5 (the trainer object) is not solution 4 plus blocks: its lesson
   is that the program of steps 0-4 (launcher, device, wrapper, epoch loop, snapshots) moved into
   the library's ddpw::Trainer, so its program is a new one of a screen. Checked instead: exercise
   and solution fit a screen (at most SCREEN_LINES lines) and hold no loop of their own.
   A later step whose lesson is in the loop again (step 6, FSDP: units, accumulation, checkpointing)
   takes up the chain where step 5 left it (CHAIN_RESUMES): exercise 6 is solution 4 plus step 6's
   TODO(step6) blocks, checked as in 2.
4. An optional step whose folder has a letter after its number (step1b_*) branches off solution N
   (1 for 1b) and is not in the chain (step 2 still follows solution 1). Exercise Nb is solution N
   with some of step N's TODO(stepN) blocks replaced (those BRANCHES names: for 1b, the wrapper's)
   by blocks of its own, and its TODO(stepNb) blocks added: the two differ only in the header, the
   includes, those blocks of solution N, and the exercise's TODO(stepNb) blocks and the blocks that
   open with a `// stepNb:` comment (what the branch gives, not an exercise). Check 1 holds for it
   as for every step: exercise Nb and solution Nb differ only in TODO(stepNb) blocks.
5. Every step program, exercise and solution, is at most MAX_PROGRAM_LINES lines; one that resumes the
   chain (3) carries the whole of the solution it resumes from plus its own concept, and may take
   RESUMED_EXTRA_LINES more.

The changed-line counts of check 1 are the one source for the pages that quote them:
  check_exercises.py ROOT --counts    prints "stepN K" per step (K: lines removed + added; N may
                                      carry a branch's letter: step1b)
  check_exercises.py ROOT --docs      checks every "K changed lines" in stepN_*/README.md, and in
                                      the rows of README.md that start with "| N " or "| [N](...)",
                                      against step N's K
"""
import difflib
import pathlib
import re
import shutil
import subprocess
import sys

MAX_CHANGED_LINES = 60  # target from the course design: a diff a learner reads in one sitting
MAX_PROGRAM_LINES = 150  # every step program, exercise and solution: about two screens of lesson
RESUMED_EXTRA_LINES = 20  # a step that resumes the chain: solution 4's program (at the limit) plus FSDP's blocks
SCREEN_LINES = 60       # a program behind one object (step 5) fits a screen
CHAIN_LAST_STEP = 4     # the last step whose program is the previous solution plus its blocks
CHAIN_RESUMES = {6: 4}  # a later step that goes back to the loop: its exercise is that solution plus its blocks
STEP = re.compile(r"step(\d+)([a-z]?)_")  # step folder: number, and a branch's letter
# Branches (check 4): the words that mark the TODO(stepN) blocks of solution N that the branch
# replaces with its own (they name the blocks in their comment).
BRANCHES = {"1b": re.compile(r"wrap|DistributedDataParallel")}


def indentation(line):
    return len(line) - len(line.lstrip())


def todo_blocks(lines, step, marker=None):
    """The TODO(step) blocks: [(indices of their lines, the text of their opening comment)]. With
    `marker` (a regular expression), the blocks whose opening comment starts with it instead."""
    blocks, indent, in_comment = [], None, False  # indent: the open block's TODO comment indentation
    # A comment that starts with it, not a mention.
    opener = re.compile(r"//\s*" + (marker or r"TODO\(" + re.escape(step) + r"\)"))
    for i, line in enumerate(lines):
        opening = opener.search(line)
        if opening:
            indent, in_comment = indentation(line), True
            blocks.append((set(), []))
            if not line.strip().startswith("//"):  # a trailing comment: the block opens on its code line
                blocks[-1][1].append(line[opening.start():].lstrip("/").strip())
        elif indent is not None and (not line.strip() or indentation(line) < indent):
            indent = None
        if indent is not None:
            blocks[-1][0].add(i)
            in_comment = in_comment and line.strip().startswith("//")
            if in_comment:
                blocks[-1][1].append(line.strip().lstrip("/").strip())
    return [(marked, " ".join(text)) for marked, text in blocks]


def todo_lines(lines, step):
    """Indices of lines inside a TODO(step) block."""
    return set().union(*[b for b, _ in todo_blocks(lines, step)])


def diff_u_lines(exercise_path, solution_path, exercise, solution):
    """Lines of `diff -u` between the two files (difflib's version where diff is missing)."""
    if shutil.which("diff"):
        out = subprocess.run(["diff", "-u", str(exercise_path), str(solution_path)],
                             capture_output=True, text=True, check=False).stdout
        return len(out.splitlines())
    return len(list(difflib.unified_diff(exercise, solution, lineterm="")))


def changed_lines(root, folder):
    """Lines removed + added between exercise and solution (what a learner writes)."""
    exercise = (root / folder / "main.cpp").read_text().splitlines()
    solution = (root / "solutions" / folder / "main.cpp").read_text().splitlines()
    matcher = difflib.SequenceMatcher(a=exercise, b=solution, autojunk=False)
    return sum((a1 - a0) + (b1 - b0) for tag, a0, a1, b0, b1 in matcher.get_opcodes() if tag != "equal")


def check(root, folder):
    step = "step" + step_name(folder)
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


def step_name(folder):
    """"1b" of step1b_average_by_hand, "2" of step2_env_launch."""
    m = STEP.match(folder)
    return m.group(1) + m.group(2)


def step_key(name):
    """Course order: 1, 1b, 2, ..."""
    m = re.fullmatch(r"(\d+)([a-z]?)", str(name))
    return (int(m.group(1)), m.group(2)) if m else (1 << 30, str(name))


def header_lines(lines):
    """Indices of the leading comment, the includes and the blank lines among them."""
    marked = set()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith("//") and not stripped.startswith("#include"):
            break
        marked.add(i)
    return marked


def check_chain(root, previous_rel, folder):
    """Exercise N against solution N-1: only the header, includes, TODO(stepN) blocks, blank lines."""
    step = "step" + step_name(folder)
    exercise_rel = f"{folder}/main.cpp"
    previous_path, exercise_path = root / previous_rel, root / exercise_rel
    if not previous_path.exists():
        return [f"{exercise_rel}: {previous_rel} is missing: the chain cannot be checked"]
    previous, exercise = previous_path.read_text().splitlines(), exercise_path.read_text().splitlines()
    in_todo, head_ex, head_prev = todo_lines(exercise, step), header_lines(exercise), header_lines(previous)
    problems, changed = [], 0
    matcher = difflib.SequenceMatcher(a=previous, b=exercise, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        added = [j for j in range(b0, b1) if exercise[j].strip() and j not in head_ex]
        removed = [i for i in range(a0, a1) if previous[i].strip() and i not in head_prev]
        changed += len(added) + len(removed)
        for j in added:
            if j not in in_todo:
                problems.append(f"{exercise_rel}:{j + 1}: differs from {previous_rel} outside the header, the includes "
                                f"and the TODO({step}) blocks: {exercise[j].strip()}")
        # A line of solution N-1 may go only where the exercise has a TODO(stepN) block instead.
        inside_block = any(j in in_todo for j in range(b0, b1)) or (b0 == b1 and b0 - 1 in in_todo)
        for i in removed:
            if not inside_block:
                problems.append(f"{previous_rel}:{i + 1}: missing from {exercise_rel} outside its TODO({step}) "
                                f"blocks: {previous[i].strip()}")
    print(f"{previous_rel} -> {exercise_rel}: {'FAILED' if problems else 'ok'}: {changed} changed lines"
          + ("" if problems else f" besides the header and includes, all in TODO({step}) blocks"))
    return problems


def check_branch(root, folder, trunk):
    """Exercise Nb against solution N (check 4): only the header, the includes, the blocks of solution
    N that BRANCHES names, the exercise's TODO(stepNb) blocks and its `// stepNb:` blocks."""
    name = step_name(folder)
    exercise_rel = f"{folder}/main.cpp"
    if name not in BRANCHES or not trunk:
        return [f"{exercise_rel}: step {name} is not a known branch of a step (fix: add it to BRANCHES in "
                f"tests/check_exercises.py, with the words that name the blocks of its trunk it replaces)"]
    trunk_step = "step" + STEP.match(trunk[0]).group(1)
    trunk_rel = f"solutions/{trunk[0]}/main.cpp"
    trunk_path, exercise_path = root / trunk_rel, root / exercise_rel
    if not trunk_path.exists():
        return [f"{exercise_rel}: {trunk_rel} is missing: the branch cannot be checked"]
    trunk_lines, exercise = trunk_path.read_text().splitlines(), exercise_path.read_text().splitlines()
    replaced = set().union(*[b for b, text in todo_blocks(trunk_lines, trunk_step) if BRANCHES[name].search(text)])
    own = set().union(*[b for b, _ in todo_blocks(exercise, "step" + name)],
                      *[b for b, _ in todo_blocks(exercise, None, marker=re.escape(f"step{name}:"))])
    head_ex, head_trunk = header_lines(exercise), header_lines(trunk_lines)
    problems, changed = [], 0
    if not replaced:
        problems.append(f"{trunk_rel}: no TODO({trunk_step}) block names {BRANCHES[name].pattern}: the branch "
                        f"{folder} has nothing to replace (fix: BRANCHES in tests/check_exercises.py)")
    matcher = difflib.SequenceMatcher(a=trunk_lines, b=exercise, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        added = [j for j in range(b0, b1) if exercise[j].strip() and j not in head_ex]
        removed = [i for i in range(a0, a1) if trunk_lines[i].strip() and i not in head_trunk]
        changed += len(added) + len(removed)
        for j in added:
            if j not in own:
                problems.append(f"{exercise_rel}:{j + 1}: differs from {trunk_rel} outside the header, the includes, "
                                f"its TODO(step{name}) blocks and its `// step{name}:` blocks: {exercise[j].strip()}")
        for i in removed:
            if i not in replaced:
                problems.append(f"{trunk_rel}:{i + 1}: missing from {exercise_rel}, but not in a block that step "
                                f"{name} replaces (those naming {BRANCHES[name].pattern}): {trunk_lines[i].strip()}")
    print(f"{trunk_rel} -> {exercise_rel}: {'FAILED' if problems else 'ok'}: {changed} changed lines"
          + ("" if problems else f" besides the header and includes, all in the {trunk_step} blocks it replaces "
             f"and its own (a branch: step {int(STEP.match(folder).group(1)) + 1} still follows {trunk_rel})"))
    return problems


def check_lengths(root, folders):
    """Check 5: each program fits MAX_PROGRAM_LINES (a step that resumes the chain: RESUMED_EXTRA_LINES more)."""
    problems = []
    for folder in folders:
        resumes = not STEP.match(folder).group(2) and int(STEP.match(folder).group(1)) in CHAIN_RESUMES
        limit = MAX_PROGRAM_LINES + (RESUMED_EXTRA_LINES if resumes else 0)
        for rel in (f"{folder}/main.cpp", f"solutions/{folder}/main.cpp"):
            if (root / rel).exists():
                n = len((root / rel).read_text().splitlines())
                if n > limit:
                    problems.append(f"{rel}: {n} lines, more than {limit} (fix: move plumbing into the "
                                    f"library or course/, or shorten the comments)")
    print(f"{len(folders)} steps: {'FAILED' if problems else 'ok'}: every program at most {MAX_PROGRAM_LINES} lines "
          f"({MAX_PROGRAM_LINES + RESUMED_EXTRA_LINES} where it resumes the chain)")
    return problems


def check_screen_program(root, folder):
    """A step whose program calls the library's trainer: a screen long, no loop of its own."""
    problems = []
    for rel in (f"{folder}/main.cpp", f"solutions/{folder}/main.cpp"):
        lines = (root / rel).read_text().splitlines()
        if len(lines) > SCREEN_LINES:
            problems.append(f"{rel}: {len(lines)} lines, more than a screen ({SCREEN_LINES})")
        for i, line in enumerate(lines):
            code = line.split("//")[0]
            if re.search(r"\b(for|while)\s*\(", code):
                problems.append(f"{rel}:{i + 1}: a loop of its own (the trainer's loop is in the library): {line.strip()}")
    print(f"{folder}: {'FAILED' if problems else 'ok'}: a program of a screen without a loop (not in the chain: "
          f"it replaces solution {CHAIN_LAST_STEP}'s program)")
    return problems


COUNT_PHRASE = re.compile(r"\b(\d+) changed lines\b")


def check_docs(root, counts):
    """Every "K changed lines" on a step's page, and in README.md's rows "| N ...", is step N's K."""
    problems, seen = [], 0
    pages = [(step_name(p.parent.name), p) for p in sorted(root.glob("step*_*/README.md")) if STEP.match(p.parent.name)]
    pages.append((None, root / "README.md"))
    for step, page in pages:
        if not page.exists():
            continue
        for number, line in enumerate(page.read_text().splitlines(), 1):
            row = re.match(r"\|\s*\[?(\d+[a-z]?)\b", line)  # "| 1 |", "| 1b |" or a link "| [1](step1_.../README.md) |"
            n = step if step is not None else (row.group(1) if row else None)
            if n is None:
                continue
            for match in COUNT_PHRASE.finditer(line):
                seen += 1
                want = counts.get(n)
                rel = page.relative_to(root)
                if want is None:
                    problems.append(f"{rel}:{number}: '{match.group(0)}' for step {n}, which has no solution to count against")
                elif int(match.group(1)) != want:
                    problems.append(f"{rel}:{number}: says '{match.group(0)}' for step {n}; "
                                    f"tests/check_exercises.py counts {want} (fix: write '{want} changed lines')")
    print(f"{seen} mentions of 'K changed lines' checked: {'ok' if not problems else 'FAILED'}")
    return problems


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    modes = [a for a in sys.argv[1:] if a.startswith("--")]
    unknown = [m for m in modes if m not in ("--counts", "--docs")]
    if unknown:
        print(f"unknown option {unknown[0]} (use --counts or --docs)")
        return 2
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
    folders = sorted(p.parent.name for p in (root / "solutions").glob("step*/main.cpp"))
    if not folders:
        print(f"no solutions found in {root / 'solutions'}: the counts need them")
        return 1
    if modes:
        counts = {step_name(f): changed_lines(root, f) for f in folders}
        if "--counts" in modes:
            for n, k in sorted(counts.items(), key=lambda item: step_key(item[0])):
                print(f"step{n} {k}")
        problems = check_docs(root, counts) if "--docs" in modes else []
        for p in problems:
            print(p)
        return 1 if problems else 0
    problems = [p for f in folders for p in check(root, f)]
    # The chain: step 0 (the starting program) -> exercise 1, solution 1 -> exercise 2, ...
    all_steps = sorted((p.parent.name for p in root.glob("step*_*/main.cpp") if STEP.match(p.parent.name)),
                       key=lambda f: step_key(step_name(f)))
    branches = [s for s in all_steps if STEP.match(s).group(2)]
    steps = [s for s in all_steps if s not in branches and int(STEP.match(s).group(1)) <= CHAIN_LAST_STEP]
    resumed = {s: [t for t in steps if int(STEP.match(t).group(1)) == CHAIN_RESUMES[int(STEP.match(s).group(1))]]
               for s in all_steps if s not in branches and int(STEP.match(s).group(1)) in CHAIN_RESUMES}
    problems += [p for f in all_steps if f not in steps + branches + list(resumed) for p in check_screen_program(root, f)]
    links = list(zip(steps, steps[1:])) + [(trunk[0], folder) for folder, trunk in resumed.items() if trunk]
    problems += [f"{folder}/main.cpp: the step it resumes the chain from is missing" for folder, t in resumed.items() if not t]
    for previous, folder in links:
        previous_rel = f"{previous}/main.cpp" if previous.startswith("step0") else f"solutions/{previous}/main.cpp"
        problems += check_chain(root, previous_rel, folder)
    problems += check_lengths(root, all_steps)
    for folder in branches:
        problems += check_branch(root, folder, [s for s in steps if STEP.match(s).group(1) == STEP.match(folder).group(1)])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
