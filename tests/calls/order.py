#!/usr/bin/env python3
"""tracepad calls's lines are in the order of the calls' returns across threads: 4 threads
malloc and free blocks under one lock, taking a sequence number right after each return
(calls-heaporder prints them at the end); the line of every such call is found in tracepad's
output and their sequence numbers must rise along the lines, with no pair out of order; so
no malloc line returns a block that an earlier line has not freed; and, for the agent engine
(whose threads write records into rings of their own that tracepad merges), the same with
the program's own order_op, 4 threads taking turns so that every return is next to another
thread's.  With the engine of argv[2]."""
import re
from collections import defaultdict, deque

from tpcalls import ENGINE, LINE, calls, check, done, run, target

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

# calls-heaporder own calls order_op(k, i), which returns k * 100000 + i.
OWN = ["-e", "calls-heaporder:order_op"]


def own_log(out):
    """{(tid, token): seq} of the program's log, and its tids in the order of seq."""
    log, order = {}, []
    for ln in out.splitlines():
        f = ln.split()
        if len(f) == 4 and f[1] == "op":
            log[(int(f[0]), int(f[2]))] = int(f[3])
            order.append((int(f[3]), int(f[0])))
    return log, [t for _, t in sorted(order)]


# The agent engine's leg only: its threads write into rings of their own that tracepad
# merges, while the ptrace engine's stops at each call serialise the threads (their calls
# interleave less: the malloc and free lines above are its test).
nat = run([prog, "own"])
log, tids = own_log(nat.out)
check(nat.rc == 0 and len(log) == 4800, "own, native: 4800 calls logged", nat)
for opts in ([], ["-T"]) if ENGINE == "agent" else ():
    what = " ".join(["own", ENGINE or "default engine"] + opts)
    for rep in range(3):
        r = calls(opts + OWN, [prog, "own"])
        log, tids = own_log(r.out)
        # returns of two threads next to each other, whose lines' order is put to the test:
        # 3,700 to 4,800 of the 4,800 here, as the scheduler lets the threads alternate
        turns = sum(a != b for a, b in zip(tids, tids[1:]))
        check(r.rc == 0 and len(log) == 4800 and turns >= 1000,
              "%s #%d: the program ran, its threads' calls interleaved (%d turns)" %
              (what, rep, turns), r)
        seqs, wrong = [], []
        for c in r.calls:
            if c.function != "order_op":
                continue
            k, i = (c.args or [None, None])[:2]
            if k is None or i is None or c.retint != k * 100000 + i:
                wrong.append(c)
            if (c.tid, c.retint) in log:
                seqs.append(log.pop((c.tid, c.retint)))
        check(len(seqs) == 4800 and not wrong,
              "%s #%d: a line for each of the 4800 calls, with its arguments and value" %
              (what, rep), "%d found, %d lines wrong: %r" % (len(seqs), len(wrong), wrong[:3]))
        bad = [(a, b) for a, b in zip(seqs, seqs[1:]) if b < a]
        check(not bad, "%s #%d: no two lines out of the order of the returns" % (what, rep),
              "%d pairs out of order, first %r" % (len(bad), bad[:5]))
done()
