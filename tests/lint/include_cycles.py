#!/usr/bin/env python3
"""lint.include_cycles: no include cycle in the library (ddp/).

A module is a header and its source together (ddp/grad_scaler.h + ddp/grad_scaler.cpp): module A
depends on module B when one of A's files includes "ddp/B.h". A cycle of such dependencies
(grad_scaler.cpp includes sharded_adamw.h, which includes grad_scaler.h) means neither half can be
understood, tested or changed without the other; the fix is a small interface one side implements.
The check first proves it catches a planted cycle and lets a chain without one pass.

  include_cycles.py ROOT   (the project's root; checks ROOT/ddp)
"""
import pathlib
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"(ddp/[^"]+)\.(?:h|hpp)"', re.M)


def graph(root):
    """{module: {module it includes: the file that includes it}} for the modules under root/ddp."""
    edges = {}
    lib = root / "ddp"
    for f in sorted(lib.rglob("*")):
        if f.suffix not in (".h", ".cpp", ".hpp", ".in") or not f.is_file():
            continue
        module = "ddp/" + str(f.relative_to(lib).with_suffix("")).removesuffix(".h")
        out = edges.setdefault(module, {})
        for target in INCLUDE.findall(f.read_text(errors="replace")):
            if target != module:
                out.setdefault(target, str(f.relative_to(root)))
    return edges


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def describe(edges, component):
    members = set(component)
    return "\n".join(f"  {via} includes {dst}.h" for src in component for dst, via in sorted(edges[src].items())
                     if dst in members)


def self_test():
    """The check catches a planted cycle (through a source file) and passes a chain."""
    with tempfile.TemporaryDirectory() as tmp:
        lib = pathlib.Path(tmp) / "ddp"
        lib.mkdir()
        (lib / "a.h").write_text('#include "ddp/b.h"\n')
        (lib / "b.h").write_text('#include "ddp/c.h"  // defines: C\n')
        (lib / "c.h").write_text("#pragma once\n")
        (lib / "c.cpp").write_text('#include "ddp/c.h"\n')
        if cycles(graph(pathlib.Path(tmp))):
            return "the check refuses a chain without a cycle (a.h -> b.h -> c.h)"
        (lib / "c.cpp").write_text('#include "ddp/c.h"\n#include "ddp/a.h"\n')
        if cycles(graph(pathlib.Path(tmp))) != [["ddp/a", "ddp/b", "ddp/c"]]:
            return "the check misses a planted cycle (c.cpp includes a.h, a.h -> b.h -> c.h)"
    return None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    problem = self_test()
    if problem:
        print("FAIL:", problem)
        return 1
    edges = graph(root)
    if len(edges) < 10:
        print(f"FAIL: found only {len(edges)} modules under {root / 'ddp'} (wrong root?)")
        return 1
    found = cycles(edges)
    for component in found:
        print("include cycle among " + ", ".join(component) + ":\n" + describe(edges, component))
    if found:
        print("FAIL: the library's modules include each other. Fix: give one side a small interface (a class with"
              " virtual functions, or a callback) in its own header, which the other implements, so the"
              " dependency points one way")
        return 1
    print(f"ok: no include cycle among the library's {len(edges)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
