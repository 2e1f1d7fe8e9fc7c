#!/usr/bin/env python3
"""Run the whole test suite through `meson test` and end with one summary line:
'N passed, N failed' (plus ', N skipped' when any test skipped)."""
import json
import os
import subprocess
import sys

build = sys.argv[1] if len(sys.argv) > 1 else "build"
log = os.path.join(build, "meson-logs", "testlog.json")
if os.path.exists(log):
    os.unlink(log)
rc = subprocess.call(["meson", "test", "-C", build, "--print-errorlogs", "--num-processes", "2"],
                     stdin=subprocess.DEVNULL)
passed = failed = skipped = 0
try:
    with open(log) as f:
        for line in f:
            r = json.loads(line)["result"]
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
except FileNotFoundError:
    failed += 1
if passed + failed + skipped == 0:
    print("no test ran", file=sys.stderr)
    failed = 1
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed or rc not in (0,) else 0)
