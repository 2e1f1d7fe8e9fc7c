#!/usr/bin/env python3
"""e2e: a real test suite nobody here wrote passes under the dbt engine as it does natively.

CPython's own regression tests (Debian's libpython3.11-testsuite) run in one Python process
(regrtest without -j, so the interpreter and every test run in the code cache; the programs
test_subprocess starts are exec'd and run natively, as under the engine they must).  Each
module runs natively and under `tracepad count --engine dbt` at the same time; every test
that passes natively must pass in the cache.  Timing-sensitive tests can fail under load in
either run, so a test that failed only in the cache runs once more, alone, in the cache: a
failure counts when it happens again there (the rerun is reported, and regrtest's exit
status is then that of the first run, not compared).  The modules are
Debian's Python's (/usr/bin/python3): the `python3` first in PATH may be another one."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import TRACEPAD, Checks  # noqa: E402

PYTHON = "/usr/bin/python3"
MODULES = ["test_json", "test_re", "test_threading", "test_signal", "test_subprocess"]
TIMEOUT = 300  # a module, native and cached runs at once (test_signal: ~70 s loaded)

c = Checks("dbt-pytests")
# "test_x (test.test_mod.Class.test_x) ... ok", possibly after the test's own output lines
RESULT = re.compile(r"^(test\w*) \(([\w.]+)\)(?:\n[^\n]*?)*? \.\.\. "
                    r"(ok|skipped.*|FAIL|ERROR|expected failure|unexpected success)$", re.M)


def outcomes(log):
    """{test id: outcome} from regrtest's verbose log."""
    res = {}
    for m in RESULT.finditer(log):
        res[m.group(2)] = m.group(3).split()[0]
    return res


def regrtest(mod, extra=(), dbt=None):
    argv = [PYTHON, "-m", "test", "-v", mod] + list(extra)
    if dbt:
        argv = [TRACEPAD, "count", "--engine", "dbt", "--json", "-o", dbt, "--"] + argv
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def finish(p, deadline=None):
    """(exit status, output) of regrtest run @p, or (None, output) once it is killed at
    @deadline (time.monotonic(); TIMEOUT from now by default)."""
    left = TIMEOUT if deadline is None else max(1, deadline - time.monotonic())
    try:
        out, _ = p.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        # the whole group: a program tracepad launched runs on when tracepad is killed
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out
    return p.returncode, out


def report(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


if not os.path.exists("/usr/lib/python3.11/test/regrtest.py"):
    c.bail("libpython3.11-testsuite is not installed (scripts/deps.sh installs it)")

with tempfile.TemporaryDirectory(prefix="tp-dbt-py-") as tmp:
    for mod in MODULES:
        rep = os.path.join(tmp, mod + ".json")
        pn, pd = regrtest(mod), regrtest(mod, dbt=rep)
        end = time.monotonic() + TIMEOUT  # both at once: a hang fails a check, not meson
        (rn, out_n), (rd, out_d) = finish(pn, end), finish(pd, end)
        nat, cache = outcomes(out_n), outcomes(out_d)
        c.ok(rn is not None and len(nat) > 20, "%s: runs natively (%d tests)" % (mod, len(nat)),
             out_n[-3000:])
        c.ok(rd is not None, "%s: ends under the dbt engine" % mod, out_d[-3000:])
        c.eq(sorted(cache), sorted(nat), "%s: the same tests run under the dbt engine" % mod,
             out_d[-3000:])
        lost = sorted(t for t, o in nat.items() if o == "ok" and cache.get(t) != "ok")
        again = []
        for t in lost:
            name = t.rsplit(".", 1)[1]
            r2, out2 = finish(regrtest(mod, ["-m", name], dbt=os.path.join(tmp, "re.json")))
            if outcomes(out2).get(t) != "ok":
                again.append((t, cache.get(t), out2[-1500:]))
        if lost:
            print("# %s: passed when run again alone in the cache: %s"
                  % (mod, ", ".join(t for t in lost if t not in [a[0] for a in again])))
        c.ok(not again, "%s: every test that passes natively passes under the dbt engine" % mod,
             "\n".join("%s: %s\n%s" % a for a in again))
        if rn == 0 and not lost:
            c.eq(rd, 0, "%s: regrtest's exit status as native" % mod, out_d[-2000:])
        r = report(rep)
        if c.ok(r is not None and r.get("engine") == "dbt", "%s: JSON report" % mod, r):
            c.ok(r["instructions"] > 10**8 and "warning" not in r,
                 "%s: counted (%d instructions), no warning" % (mod, r["instructions"]),
                 r.get("warning"))
c.done()
