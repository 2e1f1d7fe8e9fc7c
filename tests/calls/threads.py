#!/usr/bin/env python3
"""tracepad calls on 4 threads calling tpc_add concurrently, with the engine of argv[2]: exact
per-thread counts (against the tids and counts the program prints), correct values, and never
a split line."""
import re

from tpcalls import ENGINE, check, done, calls, run, target, ENTRY

prog = target("calls-multi")
COUNTS = [300 * (k + 2) for k in range(4)]


def threads_of(out):
    return {int(m.group(2)): (int(m.group(1)), int(m.group(3)), int(m.group(4))) for m in
            re.finditer(r"^thread (\d+) tid (\d+) calls (\d+) sum (\d+)$", out, re.M)}


nat = run([prog, "threads"])
check(nat.rc == 0 and sorted(c for _, c, _ in threads_of(nat.out).values()) == COUNTS,
      "native run", nat)

for opts in (["-e", "libtpcalls:tpc_add"], ["-e", "libtpcalls:tpc_add", "-T", "--entry"]):
    what = ENGINE + " " + (" ".join(o for o in opts if o.startswith("-") and o != "-e")
                           or "plain")
    for rep in range(3):
        r = calls(opts, [prog, "threads"])
        th = threads_of(r.out)
        check(r.rc == 0 and len(th) == 4 and all(c == COUNTS[k] for k, c, _ in th.values()),
              "%s #%d: the program ran as natively" % (what, rep), r)
        bad = r.unparsed(entries="--entry" in opts)
        check(not bad, "%s #%d: every line is a whole call line (no split line)" % (what, rep),
              "\n".join(bad[:10]))
        cs = r.calls
        per = {}
        for c in cs:
            per.setdefault(c.tid, []).append(c)
        want = {tid: k for tid, (k, _, _) in th.items()}
        check(sorted(per) == sorted(want), "%s #%d: lines from exactly the 4 threads" % (what, rep),
              "traced tids %r, program's %r" % (sorted(per), sorted(want)))
        for tid, k in sorted(want.items(), key=lambda kv: kv[1]):
            mine = per.get(tid, [])
            check(len(mine) == COUNTS[k], "%s #%d: thread %d: %d calls" % (what, rep, k, COUNTS[k]),
                  "got %d" % len(mine))
            bad = [c for j, c in enumerate(mine) if c.args != [k + 1, j] or c.retint != k + 1 + j
                   or c.depth != 0]
            check(mine and not bad, "%s #%d: thread %d: arguments and return values in order"
                  % (what, rep, k), bad[:5])
            check(sum(c.retint or 0 for c in mine) == th[tid][2],
                  "%s #%d: thread %d: traced sum is the thread's sum" % (what, rep, k))
        if "-T" in opts:
            check(cs and all(c.seconds is not None for c in cs),
                  "%s #%d: -T: every line has its duration" % (what, rep))
        if "--entry" in opts:
            ent = [ln for ln in r.lines if ENTRY.match(ln)]
            check(len(ent) == sum(COUNTS), "%s #%d: --entry: one entry line per call"
                  % (what, rep), "%d entry lines" % len(ent))
done()
