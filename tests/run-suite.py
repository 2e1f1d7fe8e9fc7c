#!/usr/bin/env python3
"""Run the whole test suite through `meson test` in each build directory given (the normal
build, then the ASan+UBSan one) and end with one summary line: 'N passed, N failed' (plus
', N skipped' when any test skipped)."""
import json
import os
import subprocess
import sys

builds = sys.argv[1:] or ["build"]
passed = failed = skipped = 0
rc_all = 0
for build in builds:
    log = os.path.join(build, "meson-logs", "testlog.json")
    if os.path.exists(log):
        os.unlink(log)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    print("== meson test -C %s" % build, flush=True)
    rc = subprocess.call(["meson", "test", "-C", build, "--print-errorlogs",
                          "--num-processes", "2"], stdin=subprocess.DEVNULL, env=env)
    rc_all = rc_all or rc
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
line = "%d passed, %d failed" % (passed, failed)
if skipped:
    line += ", %d skipped" % skipped
print(line)
sys.exit(1 if failed or rc_all else 0)
