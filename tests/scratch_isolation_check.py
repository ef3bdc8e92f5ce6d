#!/usr/bin/env python3
"""Every CTest test of this build tree has its own scratch folder (TEST_TMPDIR, set by
moezero_isolate_tests() in tests/CMakeLists.txt), and no two tests share one: what lets
`ctest -j` (scripts/test.sh) run them at once. Usage: scratch_isolation_check.py BUILD_DIR"""
import json
import subprocess
import sys

build = sys.argv[1]
out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], check=True,
                     capture_output=True, text=True).stdout
tests = json.loads(out)["tests"]
seen, bad = {}, []
for t in tests:
    env = {}
    for p in t.get("properties", []):
        if p["name"] == "ENVIRONMENT":
            for kv in p["value"]:
                k, _, v = kv.partition("=")
                env[k] = v
    d = env.get("TEST_TMPDIR")
    if not d:
        bad.append(f"{t['name']}: no TEST_TMPDIR (call moezero_isolate_tests() in its CMakeLists.txt)")
    elif d in seen:
        bad.append(f"{t['name']}: shares TEST_TMPDIR {d} with {seen[d]}")
    else:
        seen[d] = t["name"]
if len(tests) < 10:
    bad.append(f"only {len(tests)} tests listed")
for b in bad:
    print(b)
print(f"{len(tests)} tests, {len(seen)} own scratch folders")
sys.exit(1 if bad else 0)
