#!/usr/bin/env python3
"""Run the whole test suite through `meson test` in each build directory given (the normal
build, then the ASan+UBSan one), as many tests at a time as the machine has cores, and end with
the TAP points (the checks inside the tests) per build, then one summary line of tests over all
builds: 'N passed, N failed' (plus ', N skipped' when any test skipped).  .ci/run and
`make check` end with that line: keep it last and in this form."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def tests_of(log, failures):
    """(passed, failed, skipped) meson tests in testlog.json; appends to FAILURES a few lines on
    each failed test (its result, failed points and last output lines), so that the tail of a
    CI log, often all that is kept of it, still names what failed and how."""
    passed = failed = skipped = 0
    with open(log) as f:
        for line in f:
            t = json.loads(line)
            r = t["result"]
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
                failures.append(failure(log, t))
    return passed, failed, skipped


def failure(log, t):
    out = (t.get("stdout") or "").splitlines()
    err = (t.get("stderr") or "").splitlines()
    bad = [l for l in out if l.startswith("not ok")][:5]
    head = "== FAILED %s: %s (%s, rc %s, %.1f s)" % (
        os.path.dirname(os.path.dirname(log)), t["name"], t["result"], t.get("returncode"), t.get("duration", 0))
    return "\n".join([head] + ["   " + l[:300] for l in bad + (out + err)[-8:]])


def todos_of(log):
    """The TAP points marked TODO in testlog.json (known gaps, named in the point: meson
    does not count them as failures), as "TEST: POINT" lines, so that the summary shows
    them."""
    out = []
    with open(log) as f:
        for line in f:
            t = json.loads(line)
            for ln in (t.get("stdout") or "").splitlines():
                if ln.startswith("not ok") and " # TODO " in ln:
                    out.append("%s: %s" % (t["name"], ln[:300]))
    return out


def points_of(junit):
    """(passed, failed, skipped) TAP points in testlog.junit.xml, where meson writes each TAP
    test as a testsuite named PROJECT.TEST with one testcase a point."""
    passed = failed = skipped = 0
    for suite in ET.parse(junit).getroot().iter("testsuite"):
        if "." not in suite.get("name", ""):
            continue  # the tests without points (exit-code protocol), one testcase each
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped


def sanitized(build):
    """True when BUILD was configured with -Dsanitize=true: ASan and UBSan make every traced
    program and tracepad itself two to three times slower, so its tests get twice the time."""
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            return any(o["name"] == "sanitize" and o["value"] for o in json.load(f))
    except (OSError, ValueError):
        return False


def counts(what, p, f, s):
    return "%d %s: %d passed, %d failed, %d skipped" % (p + f + s, what, p, f, s)


builds = sys.argv[1:] or ["build"]
jobs = os.cpu_count() or 1
passed = failed = skipped = 0
rc_all = 0
summaries = []
failures = []
for build in builds:
    logs = [os.path.join(build, "meson-logs", "testlog" + ext) for ext in (".json", ".junit.xml")]
    for log in logs:
        if os.path.exists(log):
            os.unlink(log)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    args = ["meson", "test", "-C", build, "--print-errorlogs", "--num-processes", str(jobs)]
    if sanitized(build):
        args += ["--timeout-multiplier", "2"]
    print("== %s" % " ".join(args[1:]), flush=True)
    rc = subprocess.call(args, stdin=subprocess.DEVNULL, env=env)
    rc_all = rc_all or rc
    try:
        p, f, s = tests_of(logs[0], failures)
    except FileNotFoundError:
        p, f, s = 0, 1, 0
        summaries.append("== %s: no test log" % build)
    else:
        try:
            points = counts("TAP points", *points_of(logs[1]))
        except (FileNotFoundError, ET.ParseError) as e:
            points = "TAP points unknown (%s)" % e
        todos = todos_of(logs[0])
        if todos:
            points += " (%d of the passed marked TODO: known gaps)" % len(todos)
            failures += ["== TODO %s: %s" % (build, t) for t in todos]
        summaries.append("== %s: %s; %s" % (build, counts("tests", p, f, s), points))
    passed, failed, skipped = passed + p, failed + f, skipped + s
for line in failures + summaries:
    print(line)
if passed + failed + skipped == 0:
    print("no test ran", file=sys.stderr)
    failed = 1
line = "%d passed, %d failed" % (passed, failed)
if skipped:
    line += ", %d skipped" % skipped
print(line)
sys.exit(1 if failed or rc_all else 0)
