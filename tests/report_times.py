#!/usr/bin/env python3
"""Where a test run's time went: the slowest tests and the seconds per label.

    report_times.py BUILD_DIR JUNIT_XML [--slowest N] [--markdown]

Reads the times from CTest's JUnit report (ctest --output-junit) and the labels from CTest's own
list of the tests (ctest --show-only=json-v1), so a test counts under every label it carries (the
label totals may add up to more than the run). scripts/test prints this at the end of every run;
--markdown prints the label table as docs/tests.md keeps it.
"""
import argparse
import collections
import json
import subprocess
import sys
import xml.etree.ElementTree as ET


def labels_by_test(build_dir):
    listing = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"], check=True,
                             capture_output=True, text=True).stdout
    labels = {}
    for test in json.loads(listing)["tests"]:
        values = [p["value"] for p in test.get("properties", []) if p["name"] == "LABELS"]
        labels[test["name"]] = values[0] if values else ["(no label)"]
    return labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("junit")
    parser.add_argument("--slowest", type=int, default=15)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()

    try:
        suite = ET.parse(args.junit).getroot()
    except (OSError, ET.ParseError) as error:
        sys.exit(f"report_times: cannot read CTest's JUnit report {args.junit}: {error}")
    labels = labels_by_test(args.build_dir)
    times = []
    for case in suite.iter("testcase"):
        status = case.get("status", "run")
        if case.find("skipped") is not None:
            status = "skipped"
        elif case.find("failure") is not None:
            status = "failed"
        times.append((float(case.get("time", "0")), case.get("name"), status))
    if not times:
        sys.exit(f"report_times: no test in {args.junit}")

    per_label = collections.defaultdict(lambda: [0.0, 0])
    for seconds, name, _ in times:
        for label in labels.get(name, ["(no label)"]):
            per_label[label][0] += seconds
            per_label[label][1] += 1
    total = sum(seconds for seconds, _, _ in times)
    rows = sorted(per_label.items(), key=lambda item: -item[1][0])

    if args.markdown:
        print("| label | tests | seconds |")
        print("|---|---:|---:|")
        for label, (seconds, count) in rows:
            print(f"| {label} | {count} | {seconds:.0f} |")
        print(f"| all (each test once) | {len(times)} | {total:.0f} |")
        return

    print(f"# the {min(args.slowest, len(times))} slowest of {len(times)} tests (seconds, wall clock)")
    for seconds, name, status in sorted(times, reverse=True)[:args.slowest]:
        mark = "" if status in ("run", "passed") else f"  ({status})"
        print(f"{seconds:8.1f}  {name}{mark}")
    print("# seconds per label (a test with two labels counts in both)")
    for label, (seconds, count) in rows:
        print(f"{seconds:8.1f}  {label} ({count} tests)")
    print(f"{total:8.1f}  all tests, each once")


if __name__ == "__main__":
    main()
