#!/usr/bin/env python3
"""e2e: both engines count hand-written asm exactly (formulas documented in targets/asm.S):
--start tp_loop (2n + 4, first call only), --start tp_repmovs (rep movsb counts once per
iteration, once for K = 0: 2 + max(K, 1)), and the <tracepad/step.h> region (2n + 10)."""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import ENGINES, Checks, count, native, target  # noqa: E402

c = Checks("exact")
asmloop, repmovs = target("asmloop"), target("repmovs")


def one_thread(rep, want, what):
    threads = rep["threads"]
    c.ok(len(threads) == 1 and threads[0]["instructions"] == want,
         what + ": one thread with all the count", threads)


def check_loop(engine, argv, start, want, what):
    nat = native(argv)
    r = count(argv, engine=engine, start=start)
    region = {"start": start, "stop": None} if start else None
    rep = c.report(r, what, engine, region)
    c.same_as_native(r, nat, what)
    if rep:
        c.eq(rep["instructions"], want, what + ": exact count")
        one_thread(rep, want, what)
    return rep


for engine in ENGINES:
    for n in (0, 1, 37, 5000):
        check_loop(engine, [asmloop, str(n)], "tp_loop", 2 * n + 4,
                   "%s asmloop n=%d --start tp_loop" % (engine, n))
    # Only the thread's first call is the region: the second call (n + 7) is not counted.
    check_loop(engine, [asmloop, "20", "twice"], "tp_loop", 2 * 20 + 4,
               "%s asmloop twice --start tp_loop" % engine)
    for k in (0, 1, 2, 100, 4096):
        check_loop(engine, [repmovs, str(k)], "tp_repmovs", 2 + max(k, 1),
                   "%s repmovs k=%d --start tp_repmovs" % (engine, k))
    # The program's own tp_step_begin()/tp_step_end() region, no --start.
    for n in (0, 300):
        check_loop(engine, [asmloop, str(n), "step"], None, 2 * n + 10,
                   "%s asmloop n=%d tp_step region" % (engine, n))

# The compiler-made step region: its exact count depends on the code gcc emitted, but both
# engines must agree, and the loop must be in it (200 more iterations: 400 more instructions).
counts = {}
for engine in ENGINES:
    for n in (50, 250):
        what = "%s asmloop n=%d step-c" % (engine, n)
        argv = [asmloop, str(n), "step-c"]
        r = count(argv, engine=engine)
        rep = c.report(r, what, engine)
        c.same_as_native(r, native(argv), what)
        counts[engine, n] = rep["instructions"] if rep else None
for engine in ENGINES:
    a, b = counts[engine, 50], counts[engine, 250]
    if a is not None and b is not None:
        c.eq(b - a, 400, "%s step-c: 200 more loop iterations count 400 more" % engine)
c.eq(counts["ptrace", 50], counts["trapflag", 50], "step-c region: engines agree")

c.done()
