#!/usr/bin/env python3
"""e2e: the dbt engine where programs make a code cache's life hard: code written at run
time without mprotect, a code cache too small for the program (flushed under load, with
threads running in it), bytes the decoder does not know, a program that sets %gs, and
signals that arrive while the runtime's own code runs.  Counts stay exact (the ptrace
engine's, corrected as tests/e2e/dbt.py does) and outputs native."""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import Checks, count, native, target  # noqa: E402

c = Checks("dbt-robust")


def ptrace_truth(argv, what):
    """The ptrace engine's count, each cpuid's late trap and the doubled exit taken out."""
    r = count(argv, engine="ptrace", by="mnemonic", top=0)
    rep = c.report(r, what + " (ptrace)", "ptrace")
    if not rep:
        return None
    cpuid = sum(e["count"] for e in rep["histogram"]["entries"] if e["key"] == "cpuid")
    return rep["instructions"] + cpuid - 1


def check(argv, what, exact=True):
    """Native output and status, no warning, and (when @exact) the ptrace engine's count."""
    nat = native(argv)
    r = count(argv, engine="dbt")
    rep = c.report(r, what, "dbt")
    c.same_as_native(r, nat, what)
    if not rep:
        return r, None
    c.ok("warning" not in rep, what + ": no warning", rep.get("warning"))
    if exact:
        want = ptrace_truth(argv, what)
        if want is not None:
            c.eq(rep["instructions"], want, what + ": the ptrace engine's count")
    return r, rep


# 1. Code written at run time on RWX pages, without mprotect: f is rewritten in place 300
# times and called directly and from g on another page (a direct call: its link must be
# undone), then its code comes in through read(2).
r, _ = check([target("jit")], "jit: code rewritten in place")
c.eq(r.out, "jit 300 rounds, sum 1138760, wrong 0\n", "jit: every result right")

# 2. A full code cache: TRACEPAD_DBT_CACHE_SIZE makes it tiny, so that it is flushed again
# and again under load (old chunks reused once no thread can run there).  Single-threaded
# programs count exactly as the ptrace engine does (both runs with the same environment);
# threads-O2's 4 workers, running in the cache at the flushes, keep their exact counts.
os.environ["TRACEPAD_DBT_CACHE_SIZE"] = "64K"
r, _ = check([target("compute-O2")], "compute-O2, 64 KiB cache")
r, _ = check([target("jit")], "jit, 64 KiB cache")
c.eq(r.out, "jit 300 rounds, sum 1138760, wrong 0\n", "jit, 64 KiB cache: every result right")


def worker_counts(argv, what):
    r, rep = check(argv, what, exact=False)
    if not rep:
        return None
    c.eq(len(rep["threads"]), 5, what + ": 5 threads", rep["threads"])
    return sorted(t["instructions"] for t in rep["threads"])[:4]


small = worker_counts([target("threads-O2"), "20"], "threads-O2, 64 KiB cache")
del os.environ["TRACEPAD_DBT_CACHE_SIZE"]
big = worker_counts([target("threads-O2"), "20"], "threads-O2")
c.eq(small, big, "threads-O2: the workers' counts with a 64 KiB cache as with the default")

# python3 with a thread: its output, under a 1 MiB cache that holds a fraction of its code
# (the chunks it maps, seen in /proc/self/maps, outnumber those of the default cache).
PY = ("import threading, json; t = threading.Thread(target=print, "
      "args=(json.dumps({'a': [1, 2]}),)); t.start(); t.join(); "
      "n = sum('tracepad-dbt-cache' in l for l in open('/proc/self/maps')); ")
if os.access("/usr/bin/python3", os.X_OK):
    r = count(["/usr/bin/python3", "-c", PY + "print(n)"], engine="dbt")
    lines = r.out.split("\n")
    if c.ok(r.rc == 0 and len(lines) == 3 and lines[1].isdigit(), "python3: runs", r):
        chunks = int(lines[1])
        os.environ["TRACEPAD_DBT_CACHE_SIZE"] = "1M"
        argv = ["/usr/bin/python3", "-c", PY + "print(n > %d)" % chunks]
        nat = native(argv)
        r = count(argv, engine="dbt")
        rep = c.report(r, "python3 with a thread, 1 MiB cache", "dbt")
        c.eq((r.rc, r.out), (0, '{"a": [1, 2]}\nTrue\n'),
             "python3 with a thread, 1 MiB cache: its output, more chunks than %d" % chunks, r)
        c.eq(nat.out, '{"a": [1, 2]}\nFalse\n', "python3 natively: no cache")
        if rep:
            c.eq(len(rep["threads"]), 2, "python3, 1 MiB cache: 2 threads", rep["threads"])
            c.ok("warning" not in rep, "python3, 1 MiB cache: no warning", rep.get("warning"))
        del os.environ["TRACEPAD_DBT_CACHE_SIZE"]

c.done()
