#!/usr/bin/env python3
"""memory plugin, allocation sites: a program keeping one block a round from each of 9 call
chains (malloc 1 to 5 calls of down() deep, through a function with a frame pointer, calloc
from main, under 6 frames of 600 bytes, in a signal handler), the same chains every round but
with other register and stack values, gets 9 still-reachable records of exactly a round's
count each, whose backtraces name each chain (down() as many times as it was deep): no block
is put under another chain's backtrace.  The agent engine remembers walks it has seen
(src/calls/unwind-memo.c) and, once tracepad has read the callers' CFI, walks the backtraces
in the program (TRACEPAD_DEBUG's count of them is checked): those walks give the frames
libdw gives.  Totals as memcheck's.  The same program exec'd by sh: its own report, as
memcheck's of it run directly."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memlib import (ENGINE, check, done, memcheck, target, tracepad,  # noqa: E402
                    same_as_memcheck)

ROUNDS = 300
argv = [target("mem-sites"), str(ROUNDS)]
r = tracepad(argv, env=dict(os.environ, TRACEPAD_DEBUG="1"))
rep = r.report
check(r.rc == 0 and b"%d rounds" % ROUNDS in r.out, "the target ran its rounds under tracepad",
      r)
groups = [g for g in rep.groups if g["kind"] == "still reachable"]
check(len(groups) == 9, "9 still-reachable records, one a call chain", groups)


def named(g, fn):
    """How many frames of @g are in function @fn ("mem-sites:down+0x19 (sites.c:23)")."""
    return sum(1 for f in g["frames"] if f.split(" ")[0].split(":")[-1].split("+")[0]
               .split(".")[0] == fn)


for d in range(5):
    g = [g for g in groups if g["bytes"] == ROUNDS * (10 + d)]
    check(len(g) == 1 and g[0]["blocks"] == ROUNDS and named(g[0], "down") == d + 1 and
          named(g[0], "leaf") == 1 and named(g[0], "main") == 1,
          "malloc %d call(s) of down() deep: %d blocks of %d bytes, down() %d time(s) in the "
          "backtrace" % (d + 1, ROUNDS, 10 + d, d + 1), g or groups)
g = [g for g in groups if g["bytes"] == ROUNDS * 20]
check(len(g) == 1 and g[0]["blocks"] == ROUNDS and named(g[0], "framed") == 1 and
      named(g[0], "main") == 1 and not named(g[0], "down"),
      "malloc through a frame pointer's function: %d blocks, its backtrace through it" % ROUNDS,
      g or groups)
g = [g for g in groups if g["bytes"] == ROUNDS * 30]
check(len(g) == 1 and g[0]["blocks"] == ROUNDS and "calloc" in g[0]["frames"][0] and
      named(g[0], "main") == 1 and len(g[0]["frames"]) >= 2 and
      "main" in g[0]["frames"][1],
      "calloc from main: %d blocks, main its caller" % ROUNDS, g or groups)
g = [g for g in groups if g["bytes"] == ROUNDS * 50]
check(len(g) == 1 and g[0]["blocks"] == ROUNDS and named(g[0], "wide") == 6 and
      named(g[0], "main") == 1,
      "malloc under 6 frames of 600 bytes: %d blocks, every frame in the backtrace" % ROUNDS,
      g or groups)
g = [g for g in groups if g["bytes"] == ROUNDS * 60]
check(len(g) == 1 and g[0]["blocks"] == ROUNDS and named(g[0], "on_usr1") == 1 and
      named(g[0], "raise") == 1 and named(g[0], "main") == 1,
      "malloc in a signal handler: %d blocks, the backtrace through the signal frame to "
      "raise() and main" % ROUNDS, g or groups)
if "agent" in ENGINE:
    m = re.search(r"backtraces: (\d+) walked by the agent, (\d+) unwound", r.err)
    # the first rounds go before tracepad has drained any: copies, until it knows the CFI
    check(m and rep.usage and int(m.group(1)) >= ROUNDS and
          int(m.group(1)) + int(m.group(2)) == rep.usage[0],
          "the agent walked backtraces itself: at least a round's, and every allocation's "
          "backtrace either walked or unwound", (m and m.group(0), rep.usage, r.err[-2000:]))
check(rep.kinds.get("definitely lost") == (0, 0), "nothing lost", rep.totals())
vg = memcheck(argv)
same_as_memcheck(r, vg, "sites")

# The program exec'd by a shell: the plugin reports the new image (the shell's allocations
# are another process's as far as it is concerned), its 9 chains, memcheck's totals for the
# program run directly; the agent engine hooks the new image anew.
ex = tracepad(["sh", "-c", 'exec "$0" "$@"', argv[0], "50"])
check(ex.rc == 0 and b"50 rounds" in ex.out, "exec'd by sh: the program ran under tracepad", ex)
groups = [g for g in ex.report.groups if g["kind"] == "still reachable"] if ex.report else []
check(len(groups) == 9 and all(g["blocks"] == 50 for g in groups),
      "exec'd by sh: 9 still-reachable records of 50 blocks each", ex)
same_as_memcheck(ex, memcheck([argv[0], "50"]), "exec'd by sh")
done()
