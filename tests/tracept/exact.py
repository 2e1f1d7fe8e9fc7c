#!/usr/bin/env python3
"""tracepad trace counts exactly: hits = collected + discarded for every tracepoint, a
condition filters exactly the calls where it holds (loop.c knows its i), pass counts stop
collection at N, the values collected are the program's, at -O0 and -O2, with threads,
while-stepping, several tracepoints, file:line and gdb scripts."""
import os
import re
import shutil
import subprocess
import tempfile

from tptrace import FAST, TRACEPAD, check, done, eq, target, trace

N = 1000
want7 = [i for i in range(N) if i % 7 == 0]

for opt in ("O0", "O2"):
    prog = target("tracept-loop-" + opt)
    r = trace(["-t", "f if i % 7 == 0", "-a", "collect i, p->x, p->y, p->name", "--", prog,
               str(N)])
    c = r.counts.get(1)
    check(r.rc == 0 and "sum " in r.out, "%s: the program runs to its end" % opt, r)
    check(c is not None and c.hits == N, "%s: %d hits" % (opt, N), r.err[-2000:])
    check(r.exact(1) and c.collected == len(want7), "%s: collected %d, hits = collected + "
          "discarded" % (opt, len(want7)), c)
    eq([f.int("i") for f in r.frames], want7, "%s: i of each frame" % opt)
    eq([f.int("p->x") for f in r.frames], [3 * i for i in want7], "%s: p->x" % opt)
    eq([f.int("p->y") for f in r.frames], want7, "%s: p->y" % opt)
    check(all(f.vals["p->name"] == "<7074000000000000>" for f in r.frames),
          "%s: p->name as bytes" % opt, r.frames[:3])

# A static program: no loader, its entry is where it starts.
r = trace(["-t", "f if i % 7 == 0", "-a", "collect i", "--", target("tracept-loop-static"),
           str(N)])
c = r.counts.get(1)
if FAST:
    # no loader to load the agent with: refused in one line, the program never ran
    check(r.rc == 2 and "use --normal" in r.err and "sum " not in r.out,
          "static: --fast refused with a clear error", r.err[-1500:])
else:
    check(r.rc == 0 and c and c.hits == N and c.collected == len(want7) and r.exact(1) and
          [f.int("i") for f in r.frames] == want7, "static: exact counts and values",
          r.err[-1500:])

prog = target("tracept-loop-O0")
# Pass count: the first 5 of the true hits, the others counted as discarded.
r = trace(["-t", "f if i % 3 == 1", "-a", "collect i", "--pass-count", "5", "--", prog, str(N)])
c = r.counts.get(1)
check(c is not None and c.hits == N and c.collected == 5 and c.discarded == N - 5,
      "pass count 5: collected 5, discarded %d" % (N - 5), r.err[-1500:])
eq([f.int("i") for f in r.frames], [1, 4, 7, 10, 13], "pass count: the first five")

# Compound conditions, globals, arrays, casts, registers and arguments.
r = trace(["-t", "f if (i > 10 && i <= 20) || i == 999",
           "-a", "collect i, g_counter, pts[1].x, *(int*)p, $arg1, $rdi",
           "--", prog, str(N)])
want = [i for i in range(N) if 10 < i <= 20 or i == 999]
eq([f.int("i") for f in r.frames], want, "&& and || select the right calls")
eq([f.int("g_counter") for f in r.frames], [i * (i - 1) // 2 for i in want],
   "a global: g_counter before the call's own addition")
eq([f.int("pts[1].x") for f in r.frames], [3 * (i - (i - 1) % 8) if i >= 1 else 0
                                           for i in want], "an array element's member")
eq([f.int("*(int*)p") for f in r.frames], [3 * i for i in want], "a cast dereference")
eq([f.int("$arg1") for f in r.frames], want, "$arg1 is the first argument")
eq([f.int("$rdi") & 0xffffffff for f in r.frames], want, "$rdi holds it too")

# Two tracepoints, one at a source line of main; every hit of each counted.
r = trace(["-t", "f if i < 3", "-a", "collect i", "-t", "loop.c:36 if i % 100 == 0",
           "-a", "collect i, sum", "--", prog, str(N)])
c1, c2 = r.counts.get(1), r.counts.get(2)
check(c1 and c2 and c1.hits == N and c2.hits == N and r.exact(1) and r.exact(2),
      "two tracepoints: %d hits each, exact" % N, r.err[-1500:])
eq([f.int("i") for f in r.frames if f.tp == 2], list(range(0, N, 100)), "loop.c:36: i")
eq(len([f for f in r.frames if f.tp == 1]), 3, "f if i < 3: three frames")

# Three tracepoints at one address (f, and its first line): one int3, each counts every hit.
r = trace(["-t", "f if i == 1", "-a", "collect i", "-t", "f if i == 2", "-a", "collect p->x",
           "-t", "loop.c:22 if i == 3", "--", prog, "5"])
check(all(r.counts.get(k) and r.counts[k].hits == 5 and r.counts[k].collected == 1
          for k in (1, 2, 3)), "three tracepoints at one address: 5 hits, 1 frame each", r)
eq([(f.tp, f.vals) for f in r.frames], [(1, {"i": "1"}), (2, {"p->x": "6"}), (3, {})],
   "three tracepoints at one address: their own frames")

# while-stepping: 4 frames after each collecting hit, at increasing pcs in f.
r = trace(["-t", "f if i == 5", "-a", "collect i", "--while-stepping", "4", "--", prog, "20"])
steps = [f for f in r.frames if f.step]
eq([f.step for f in r.frames], [0, 1, 2, 3, 4], "while-stepping 4: a hit and 4 steps")
if FAST:
    check("a normal tracepoint (int3) instead of a fast one" in r.err,
          "--fast --while-stepping: a normal tracepoint, with a note", r.err[-800:])
check(all(f.int("i") == 5 for f in r.frames), "the steps collect i too", r.frames)
check(all(f.where.startswith("f+") for f in steps) and
      len(set(f.where for f in steps)) == 4, "each step at a new pc in f", r.frames)
c = r.counts.get(1)
check(c and c.hits == 20 and c.collected == 1, "steps are not hits", c)

# Threads: 4 threads x 250 calls, each call seen once.
r = trace(["-q", "-t", "f if i % 7 == 0", "-a", "collect i", "--", prog, "threads", "4", "250"])
c = r.counts.get(1)
check(c and c.hits == 1000 and c.collected == 4 * len([i for i in range(250) if i % 7 == 0])
      and r.exact(1), "4 threads: 1000 hits, exact", r.err[-1500:])
check(r.rc == 0 and "sum " in r.out, "the threaded program ends well", r)

# A tracepoint on a library the program opens with dlopen later: pending until then.
dl = target("libtptracedl.so")
tdir = tempfile.mkdtemp(prefix="tracept-dl-")
r = trace(["--trace", os.path.join(tdir, "tr"), "-t", "libtptracedl:g if i % 4 == 0", "-a",
           "collect i", "--", target("tracept-loop-dl"), dl, "100"])
c = r.counts.get(1)
check(r.rc == 0 and "the tracepoint waits for it" in r.err and c and c.hits == 100 and
      c.collected == 25 and r.exact(1), "pending until dlopen: 100 hits, 25 frames", r)
eq([f.int("i") for f in r.frames], list(range(0, 100, 4)), "pending: the values")
check(all(f.where.startswith("g+") for f in r.frames), "pending: frames in g", r.frames[:2])
fr = subprocess.run([TRACEPAD, "frames", os.path.join(tdir, "tr"), "0"], capture_output=True,
                    text=True)
check(fr.returncode == 0 and re.search(r"^pc 0x[0-9a-f]+ g\+0x[0-9a-f]+ \(dl\.c:\d+\)$",
                                       fr.stdout, re.M) and "  i = 0" in fr.stdout,
      "pending: tracepad frames resolves the library's pcs", fr.stdout + fr.stderr)
shutil.rmtree(tdir)
r = trace(["-t", "libnosuch:g", "--", target("tracept-loop-dl"), dl, "5"])
c = r.counts.get(1)
check(r.rc == 0 and c and c.hits == 0 and "(pending)" in c.where,
      "a library never loaded: the tracepoint stays pending, the program unharmed", r)

# A gdb script: trace, condition, passcount, actions with while-stepping.
with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as s:
    s.write("# a script\ntrace f\ncondition 1 i % 10 == 0\npasscount 3\nactions\n"
            "  collect i, $regs\n  while-stepping 2\n    collect $pc\n  end\nend\n"
            "trace loop.c:36 if i == 7\nactions 2\n  collect sum\nend\n")
r = trace(["-x", s.name, "--", prog, "100"])
os.unlink(s.name)
c1, c2 = r.counts.get(1), r.counts.get(2)
check(c1 and c1.hits == 100 and c1.collected == 3 and r.exact(1), "script: passcount 3", r)
eq([(f.tp, f.step) for f in r.frames if f.tp == 1], [(1, 0), (1, 1), (1, 2)] * 3,
   "script: while-stepping 2 after each of the 3")
check(all("$rip" in f.vals and "$rsp" in f.vals for f in r.frames if f.tp == 1 and not f.step),
      "script: $regs collected by name", r.frames[:1])
eq([f.int("sum") for f in r.frames if f.tp == 2], [sum(i * i + 3 * i for i in range(7))],
   "script: tracepoint 2 at loop.c:36 sees sum")
done()
