#!/usr/bin/env python3
"""lint.site_sources: every site fact the scripts use has a row in its site's SOURCES.md.

For each clusters/<site>/ with an env.sh:
  - the module names of env.sh (ddpw_role, ddpw_load and ddpw_toolkit lines) and the #SBATCH
    partitions, GPU requests (--gres, --gpus), QoS, constraints, reservations and accounts of its
    batch scripts must each appear, in backticks, in the value column of clusters/<site>/SOURCES.md;
  - every row of that table says where the fact comes from: a page (a link or a repository file)
    and the date it was read (YYYY-MM-DD), or *unconfirmed* and, in backticks, the command that
    confirms it at the site.
Exit 1 with one line per problem and its fix; 0 when all agree.
usage: site_sources.py ROOT
"""
import re
import shlex
import sys
from pathlib import Path

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# A source: a web page, or a repository file (owner/name ... path), as the tables cite them.
SOURCE = re.compile(r"https?://|\]\(|\b[\w.-]+/[\w.-]+\b.*`[^`]+\.(md|rst|html|sh|py|slurm|sbatch|out|txt)`")
MODULE_CALLS = ("ddpw_role", "ddpw_load", "ddpw_toolkit")


def table_rows(text):
    """(line number, cells) of each table row (not the header or the separator)."""
    rows, header_seen = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            header_seen = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header_seen:
            header_seen = True  # the header row of this table
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append((number, cells))
    return rows


def documented_values(path, problems, shown):
    """The backticked values of the tables' second column; checks each row names its source."""
    values = set()
    for number, cells in table_rows(path.read_text()):
        where = f"{shown}:{number}"
        if len(cells) < 4:
            problems.append(f"{where}: a row with {len(cells)} columns (fix: | fact | value | source | read |)")
            continue
        _, value, source, read = cells[:4]
        found = re.findall(r"`([^`]+)`", value)
        if not found:
            problems.append(f"{where}: no value in backticks in the second column (fix: `the name as the scripts write it`)")
        values.update(found)
        if "*unconfirmed*" in source:
            if not re.search(r"`[^`]+`", source):
                problems.append(f"{where}: unconfirmed, but no command that confirms it (fix: add, in backticks, e.g. `module spider NAME` or `sinfo -p PART`)")
        elif not SOURCE.search(source) or not DATE.search(read):
            problems.append(f"{where}: no source page or no date read (fix: a link or repository file in the source column and YYYY-MM-DD in the read column, or *unconfirmed* and the command that confirms it)")
    return values


def module_names(env_file):
    """(line number, module name) of every name the env.sh's role lines list."""
    names = []
    for number, line in enumerate(env_file.read_text().splitlines(), 1):
        code = line.split(" #", 1)[0]
        for call in MODULE_CALLS:
            match = re.search(rf"(?:^|[\s$(]){call}\s+(.*)", code)
            if not match or code.lstrip().startswith("#"):
                continue
            rest = re.split(r"\)|\|\||&&|;", match.group(1))[0]
            try:
                words = shlex.split(rest)
            except ValueError:
                names.append((number, f"<unparsed: {rest}>"))
                continue
            if call == "ddpw_role":
                words = words[2:]  # WHEN ROLE
            elif call == "ddpw_load":
                words = words[1:2]  # WHEN NAME
            for word in words:
                for name in word.split():
                    if name != "unconfirmed" and not name.startswith("$"):
                        names.append((number, name))
    return names


def sbatch_facts(script):
    """(line number, what, value) of the site facts in a script's #SBATCH lines."""
    facts = []
    for number, line in enumerate(script.read_text().splitlines(), 1):
        if not line.startswith("#SBATCH"):
            continue
        words = line[len("#SBATCH"):].split("#", 1)[0].split()
        for i, word in enumerate(words):
            option, _, value = word.partition("=")
            if not value and option in ("-p", "-A", "-q") and i + 1 < len(words):
                value = words[i + 1]
            value = value.strip('"\'')
            if option in ("--partition", "-p"):
                facts.append((number, "partition", value))
            elif option in ("--qos", "-q"):
                facts.append((number, "QoS", value))
            elif option == "--constraint":
                facts.append((number, "constraint", value))
            elif option == "--reservation":
                facts.append((number, "reservation", value))
            elif option in ("--account", "-A") and "change_me" not in value.lower():
                facts.append((number, "account", value))
            elif option in ("--gres", "--gpus", "--gpus-per-node", "--gpus-per-task") and not value.isdigit():
                # gpu:TYPE:4 -> gpu:TYPE:N (the count is the job's shape, the type the site's)
                facts.append((number, "GPU request", re.sub(r":\d+$", ":N", value)))
    return facts


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems, checked = [], 0
    sites = sorted(p.parent for p in (root / "clusters").glob("*/env.sh"))
    if not sites:
        print(f"FAIL: no clusters/<site>/env.sh under {root}")
        return 1
    for site in sites:
        sources = site / "SOURCES.md"
        rel = lambda p: p.relative_to(root)  # noqa: E731
        if not sources.is_file():
            problems.append(f"{rel(site)}: no SOURCES.md (fix: a table | fact | value | source | read | of every site fact its scripts use)")
            continue
        values = documented_values(sources, problems, rel(sources))
        fix = f"(fix: add a row to {rel(sources)} with the page it comes from and the date read, or *unconfirmed* and the command that confirms it)"
        for number, name in module_names(site / "env.sh"):
            checked += 1
            if name not in values:
                problems.append(f"{rel(site / 'env.sh')}:{number}: module '{name}' is not in {rel(sources)} {fix}")
        for script in sorted(site.glob("*.sbatch")):
            for number, what, value in sbatch_facts(script):
                checked += 1
                if value not in values:
                    problems.append(f"{rel(script)}:{number}: {what} '{value}' is not in {rel(sources)} {fix}")
    for problem in problems:
        print(problem)
    if problems:
        print(f"FAIL: {len(problems)} site facts without their source")
        return 1
    print(f"PASS: {checked} module names and #SBATCH facts of {len(sites)} sites, each in its SOURCES.md with a source or the command that confirms it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
