#!/usr/bin/env python3
"""Every test outside the label gpu must run with CUDA_VISIBLE_DEVICES= in its environment, so
that on a GPU host it still trains on the CPU with Gloo, as in CI (a test registered without it
passes in CI, which has no GPU, and fails on the first GPU host); and with OMP_WAIT_POLICY=PASSIVE,
so that its ranks' waiting OpenMP threads do not spin on the cores the tests beside it need. Reads CTest's own list of the
tests and their properties: python3 check_cpu_tests_hide_gpus.py BUILD_DIR"""
import json
import subprocess
import sys

build = sys.argv[1]
listing = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True, capture_output=True, text=True)
tests = json.loads(listing.stdout)["tests"]
missing = []
for test in tests:
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    if "gpu" in props.get("LABELS", []):
        continue
    if ("CUDA_VISIBLE_DEVICES=" not in props.get("ENVIRONMENT", [])
            or "OMP_WAIT_POLICY=set:PASSIVE" not in props.get("ENVIRONMENT_MODIFICATION", [])):
        missing.append(test["name"])
cpu = sum(1 for t in tests if "gpu" not in {p["name"]: p["value"] for p in t.get("properties", [])}.get("LABELS", []))
if missing:
    print(f"{len(missing)} of {cpu} CPU tests lack CUDA_VISIBLE_DEVICES= (they would see the GPUs of a GPU "
          f"host) or OMP_WAIT_POLICY=set:PASSIVE in their ENVIRONMENT_MODIFICATION (tests/CMakeLists.txt: "
          f"DDPW_CPU_ONLY_ENV, DDPW_WAITS_SLEEP):")
    for name in missing:
        print("  " + name)
    sys.exit(1)
print(f"all {cpu} CPU tests hide the GPUs (CUDA_VISIBLE_DEVICES=) and let waiting threads sleep")
