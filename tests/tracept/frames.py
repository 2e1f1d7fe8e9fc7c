#!/usr/bin/env python3
"""tracepad trace --trace DIR writes each frame as a typed event, every collected value a
named field: babeltrace2 prints them by name with the values the lines showed, and
tracepad frames lists the frames and shows each with its symbol, source line and the same
values; a selection by tracepoint, pc or line finds the right frame."""
import os
import re
import shutil
import subprocess
import tempfile

from tptrace import TRACEPAD, check, done, eq, need_peer, target, trace
import run as runlib

prog = target("tracept-loop-O0")
tmp = tempfile.mkdtemp(prefix="tracept-frames-")
tdir = os.path.join(tmp, "tr")


def frames(*args):
    return runlib.run([TRACEPAD, "frames"] + list(args))


r = trace(["--trace", tdir, "-t", "f if i % 50 == 7", "-a", "collect i, p->x, p->name, $rsp",
           "-t", "loop.c:36 if i == 3", "-a", "collect i, sum", "--while-stepping", "2",
           "--", prog, "200"])
want = [i for i in range(200) if i % 50 == 7]
c = r.counts.get(1)
check(r.rc == 0 and c and c.collected == len(want), "traced with --trace", r)
lines = [f for f in r.frames]

# tracepad frames DIR: one line a frame, in order, tracepoint and step.
L = frames(tdir)
rows = [l for l in L.out.splitlines() if l.strip()]
eq([(f.tp, f.step) for f in lines],
   [tuple(int(x) for x in (re.search(r"\btp (\d+)(?:\.(\d+))?", l).group(1),
                            re.search(r"\btp (\d+)(?:\.(\d+))?", l).group(2) or 0))
    for l in rows], "frames DIR lists every frame, tracepoint and step, in order")
check(L.rc == 0 and all(re.search(r"0x[0-9a-f]+ (f|run)\+0x[0-9a-f]+ \(loop\.c:\d+\)", l)
                        for l in rows), "each with pc, symbol and line", L)

# Each frame in full: the same values as its line.
same = True
for n, f in enumerate(lines):
    d = frames(tdir, str(n))
    vals = dict(re.findall(r"^  (\w+) = (\S+)$", d.out, re.M))
    if f.tp == 1:
        exp = {"i": str(f.int("i")), "p_x": str(f.int("p->x")), "p_name": f.vals["p->name"],
               "rsp": f.vals["$rsp"]}
    else:
        exp = {"i": str(f.int("i")), "sum": str(f.int("sum"))}
    if d.rc != 0 or vals != exp:
        same = False
        check(False, "frame %d shows its line's values" % n, "%r\n%r\n%s" % (vals, exp, d.out))
        break
check(same, "tracepad frames DIR N shows the values of every frame's line")
d = frames(tdir, "0")
check(re.search(r"^frame 0: tracepoint 2, thread \d+$", d.out, re.M) and
      re.search(r"^pc 0x[0-9a-f]+ run\+0x[0-9a-f]+ \(loop\.c:36\)$", d.out, re.M) and
      re.search(r"^36\s+sum \+= f\(i, &pt\);$", d.out, re.M),
      "frame 0: header, pc with symbol and line, the source line", d)
d = frames(tdir, "--tracepoint", "1")
check(re.search(r"^frame 3: tracepoint 1, thread \d+$", d.out, re.M) and
      re.search(r"^pc 0x[0-9a-f]+ f\+0x[0-9a-f]+ \(loop\.c:22\)$", d.out, re.M) and
      re.search(r"^22\s+int sq = i \* i;$", d.out, re.M) and
      re.search(r"^  i = 7$", d.out, re.M), "--tracepoint 1: its first frame, in f", d)

# Selections.
d = frames(tdir, "--tracepoint", "2")
check(d.rc == 0 and "tracepoint 2" in d.out and re.search(r"^  i = 3$", d.out, re.M),
      "--tracepoint 2: its first frame", d)
pc = re.search(r"^pc (0x[0-9a-f]+)", frames(tdir, "0").out, re.M)
d = frames(tdir, "--pc", pc.group(1) if pc else "0x1")
check(d.rc == 0 and re.search(r"^frame 0:", d.out, re.M) and
      re.search(r"^  i = 3$", d.out, re.M), "--pc: the first frame there", d)
d = frames(tdir, "--line", "loop.c:36")
check(d.rc == 0 and "tracepoint 2" in d.out, "--line loop.c:36: tracepoint 2's frame", d)
d = frames(tdir, "999")
check(d.rc == 1 and "no such frame" in d.err, "a frame number past the end: status 1", d)

# babeltrace2 prints the fields by name.
if need_peer("babeltrace2", "babeltrace2", "babeltrace2: tracepoint_1 events with i by name"):
    b = runlib.run(["babeltrace2", tdir])
    evs = [l for l in b.out.splitlines() if "tracepoint_1:" in l]
    got = [int(re.search(r"\bi = (\d+)", l).group(1)) for l in evs]
    check(b.rc == 0 and got == want, "babeltrace2: tracepoint_1 events with i by name", b)
    check(all(re.search(r"p_x = %d\b" % (3 * i), l) for i, l in zip(want, evs)),
          "babeltrace2: p_x by name, the right values", evs[:2])
    steps = [l for l in b.out.splitlines() if "tracepoint_2_step:" in l]
    check(len(steps) == 2 and all(re.search(r"\bstep = [12]\b", l) for l in steps),
          "babeltrace2: the while-stepping frames", b.out[-1000:])
else:
    print("# babeltrace2 is not installed: its checks are left out")

# A directory that already holds a trace is refused before the program runs.
r = trace(["--trace", tdir, "-t", "f", "--", prog, "3"])
check(r.rc == 2 and "already holds" in r.err and "sum " not in r.out,
      "--trace into an existing trace: refused", r)
shutil.rmtree(tmp)
done()
