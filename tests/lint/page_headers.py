#!/usr/bin/env python3
"""lint.page_headers: the headers and the library's names that the pages tell a reader to use exist
where the pages say, and are public.

The pages: README.md, docs/*.md, every step's README.md and AFTER.md. In them, a header named in
`backticks` or as a link target:
  * `ddp/x.h` and `course/x.h` must exist;
  * `ddp/detail/x.h` must exist, and the page must say on that line that it is internal (the word
    "internal"): ddp/detail/ is the library's insides, no promise between versions, so a page that
    shows one as a header to include presents a public API that is not one;
  * a bare `x.h` is looked up in ddp/, then course/: found only in ddp/detail/, it is refused as
    above (an API table's bare name reads as a public header); found nowhere, it is refused unless it
    is a third party's (EXTERNAL).
And every `ddp::Name` the pages name (a type, a function) that a header declares must be declared in
a public header (ddp/*.h), not only in ddp/detail/ (a user's program written from the pages would
need a detail header).
The check first proves that it catches a planted mistake of each kind.

  page_headers.py ROOT   (the project's root)
"""
import pathlib
import re
import sys
import tempfile

EXTERNAL = {"nccl.h"}  # third parties' headers the pages name bare
HEADER = re.compile(r"`([A-Za-z0-9_./-]+\.h)`|\]\((?:\.\./)*([A-Za-z0-9_./-]+\.h)\)")
NAME = re.compile(r"\bddp::([A-Za-z_][A-Za-z0-9_]*)")


def pages(root):
    found = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    for step in sorted(root.glob("step*_*")):
        found += [p for p in (step / "README.md", step / "AFTER.md") if p.is_file()]
    return [p for p in found if p.is_file()]


def declared_in(root):
    """{name: {"public", "detail"}}: where ddp's headers declare each class, struct, alias, enum or function."""
    where = {}
    decl = re.compile(r"^\s*(?:template\s*<[^>]*>\s*)?(?:class|struct|using|enum(?:\s+class)?)\s+([A-Za-z_]\w*)"
                      r"|^[A-Za-z_][\w:<>,\s*&]*?[\s*&]([A-Za-z_]\w*)\s*\(", re.M)
    for kind, folder in (("public", root / "ddp"), ("detail", root / "ddp" / "detail")):
        for header in sorted(folder.glob("*.h")):
            for match in decl.finditer(header.read_text(errors="replace")):
                where.setdefault(match.group(1) or match.group(2), set()).add(kind)
    return where


def check(root):
    problems = []
    declared = declared_in(root)
    for page in pages(root):
        rel = page.relative_to(root)
        for number, line in enumerate(page.read_text(errors="replace").splitlines(), 1):
            at = f"{rel}:{number}"
            internal = "internal" in line.lower()
            for match in HEADER.finditer(line):
                name = match.group(1) or match.group(2)
                if name.startswith(("ddp/", "course/")):
                    if not (root / name).is_file() and not (root / (name + ".in")).is_file():  # config.h: generated
                        problems.append(f"{at}: names {name}, which does not exist")
                    elif name.startswith("ddp/detail/") and not internal:
                        problems.append(f"{at}: shows {name} as a header to use, but ddp/detail/ is the library's "
                                        "insides (fix: name the public header that declares it, or say on the "
                                        "line that it is internal)")
                elif "/" not in name:
                    if (root / "ddp" / name).is_file() or (root / "course" / name).is_file():
                        continue
                    if (root / "ddp" / "detail" / name).is_file():
                        if not internal:
                            problems.append(f"{at}: names {name}, which is only ddp/detail/{name}, the library's "
                                            "insides (fix: name the public header that declares it, or say on the "
                                            "line that it is internal)")
                    elif name not in EXTERNAL:
                        problems.append(f"{at}: names {name}, which is in neither ddp/ nor course/ (fix: the "
                                        "header's current name; a third party's header goes into EXTERNAL in "
                                        "tests/lint/page_headers.py)")
            for match in NAME.finditer(line):
                kinds = declared.get(match.group(1), set())
                if kinds == {"detail"} and not internal:
                    problems.append(f"{at}: names ddp::{match.group(1)}, which only ddp/detail/ declares: a "
                                    "program written from the page needs an internal header (fix: declare it in "
                                    "a public header, ddp/*.h)")
    return sorted(set(problems))


def self_test():
    """Each kind of mistake is caught, and a page without one passes."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "ddp" / "detail").mkdir(parents=True)
        (root / "course").mkdir()
        (root / "docs").mkdir()
        (root / "ddp" / "wrap.h").write_text("struct Wrap {};\nvoid wrap_it(int x);\n")
        (root / "ddp" / "detail" / "guts.h").write_text("class Guts {};\n")
        (root / "course" / "options.h").write_text("")
        good = ("Use `ddp/wrap.h` (`ddp::Wrap`, `ddp::wrap_it`), `wrap.h`, `course/options.h`, `nccl.h`;\n"
                "internal: `ddp/detail/guts.h` (`ddp::Guts`).\n")
        (root / "README.md").write_text(good)
        if check(root):
            return "the check refuses a page without a mistake: " + "; ".join(check(root))
        (root / "docs" / "bad.md").write_text("`ddp/gone.h`, `ddp/detail/guts.h`, `guts.h`, `other.h`, `ddp::Guts`\n")
        found = check(root)
        if len(found) != 5:
            return "the check found " + str(len(found)) + " of the 5 planted mistakes: " + "; ".join(found)
    return None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    problem = self_test()
    if problem:
        print("FAIL:", problem)
        return 1
    checked = pages(root)
    if len(checked) < 10:
        print(f"FAIL: found only {len(checked)} pages under {root} (wrong root?)")
        return 1
    found = check(root)
    for p in found:
        print(p)
    if found:
        print(f"FAIL: {len(found)} header or name(s) on the pages are missing or internal")
        return 1
    print(f"ok: every header and ddp:: name on {len(checked)} pages exists and is public (or said to be internal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
