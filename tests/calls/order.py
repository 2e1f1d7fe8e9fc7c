#!/usr/bin/env python3
"""tracepad calls's lines are in the order of the calls' returns across threads: 4 threads
malloc and free blocks under one lock, taking a sequence number right after each return
(calls-heaporder prints them at the end); the line of every such call is found in tracepad's
output and their sequence numbers must rise along the lines, with no pair out of order; so
no malloc line returns a block that an earlier line has not freed."""
import re
from collections import defaultdict, deque

from tpcalls import LINE, calls, check, done, run, target

prog = target("calls-heaporder")


def program_log(out):
    """{(tid, "malloc"|"free", pointer): [seq, ...]} and the number of calls logged."""
    log, n = defaultdict(deque), 0
    for ln in out.splitlines():
        f = ln.split()
        if len(f) == 5 and f[1] == "malloc":
            log[(int(f[0]), "malloc", int(f[3], 16))].append(int(f[4]))
        elif len(f) == 4 and f[1] == "free":
            log[(int(f[0]), "free", int(f[2], 16))].append(int(f[3]))
        else:
            continue
        n += 1
    return log, n


nat = run([prog])
_, nlog = program_log(nat.out)
check(nat.rc == 0 and nlog == 4800, "native run: 4800 calls logged", nat)

for opts in (["-e", "libc:malloc,libc:free"], ["-e", "libc:malloc,libc:free", "-T"]):
    what = " ".join(opts[2:]) or "plain"
    for rep in range(3):
        r = calls(opts, [prog])
        log, nlog = program_log(r.out)
        check(r.rc == 0 and nlog == 4800, "%s #%d: the program ran as natively" % (what, rep), r)
        seqs, live, twice = [], set(), 0
        for c in r.calls:
            if c.function == "malloc" and c.args and 7000 <= (c.args[0] or 0) < 7064:
                key = (c.tid, "malloc", c.retint)
            elif c.function == "free" and c.args and c.args[0]:
                key = (c.tid, "free", c.args[0])
            else:
                continue
            if not log.get(key):
                continue
            seqs.append(log[key].popleft())
            # What the issue saw: a malloc returning a block still live.
            if key[1] == "malloc":
                twice += key[2] in live
                live.add(key[2])
            else:
                live.discard(key[2])
        check(len(seqs) == 4800, "%s #%d: a line for each of the 4800 calls" % (what, rep),
              "%d found" % len(seqs))
        bad = [(a, b) for a, b in zip(seqs, seqs[1:]) if b < a]
        check(not bad, "%s #%d: no two lines out of the order of the returns" % (what, rep),
              "%d pairs out of order, first %r" % (len(bad), bad[:5]))
        check(twice == 0, "%s #%d: no malloc returns a block still live" % (what, rep),
              "%d times" % twice)
done()
