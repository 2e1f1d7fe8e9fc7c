#!/usr/bin/env python3
"""e2e: 4 threads, --start worker: each thread's first call of worker() is its region.  Both
engines report the same 4 per-thread counts (each thread does a different amount of work,
so the counts identify the threads) and the same total; output unchanged."""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import ENGINES, Checks, count, native, target  # noqa: E402

c = Checks("threads")

for opt in ("O0", "O2"):
    argv = [target("threads-" + opt), "3"]
    nat = native(argv)
    c.ok(nat.rc == 0 and nat.out.count("result") == 4, "native threads-" + opt, nat)
    per_thread, totals = {}, {}
    for engine in ENGINES:
        what = "%s threads-%s --start worker" % (engine, opt)
        r = count(argv, engine=engine, start="worker")
        rep = c.report(r, what, engine, {"start": "worker", "stop": None})
        c.same_as_native(r, nat, what)
        if not rep:
            continue
        threads = rep["threads"]
        c.eq(len(threads), 4, what + ": 4 threads ran worker (main did not)", threads)
        tids = [t["tid"] for t in threads]
        c.ok(len(set(tids)) == len(tids) and all(t > 0 for t in tids),
             what + ": distinct tids", tids)
        per_thread[engine] = sorted(t["instructions"] for t in threads)
        totals[engine] = rep["instructions"]
        # worker(i) runs 300 * (i + 1) rounds of the same loop body: counts grow with i and
        # differ by the same amount from one thread to the next.
        p = per_thread[engine]
        steps = [b - a for a, b in zip(p, p[1:])]
        c.ok(len(p) == 4 and p[0] > 0 and len(set(steps)) == 1 and steps[0] > 0,
             what + ": per-thread counts in arithmetic progression (300 more rounds each)", p)
    c.eq(per_thread.get("trapflag"), per_thread.get("ptrace"),
         "threads-%s: engines agree on each thread's count" % opt)
    c.eq(totals.get("trapflag"), totals.get("ptrace"),
         "threads-%s: engines agree on the total" % opt)

c.done()
