#!/usr/bin/env python3
"""memory plugin, allocation sites: a program keeping one block a round from each of 7 call
chains (malloc 1 to 5 calls of down() deep, through a function with a frame pointer, calloc
from main), the same chains every round but with other register and stack values, gets 7
still-reachable records of exactly a round's count each, whose backtraces name each chain
(down() as many times as it was deep): no block is put under another chain's backtrace (the
agent engine remembers walks it has seen: src/calls/unwind-memo.c).  Totals as memcheck's."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memlib import check, done, memcheck, target, tracepad, same_as_memcheck  # noqa: E402

ROUNDS = 300
argv = [target("mem-sites"), str(ROUNDS)]
r = tracepad(argv)
rep = r.report
check(r.rc == 0 and b"%d rounds" % ROUNDS in r.out, "the target ran its rounds under tracepad",
      r)
groups = [g for g in rep.groups if g["kind"] == "still reachable"]
check(len(groups) == 7, "7 still-reachable records, one a call chain", groups)


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
check(rep.kinds.get("definitely lost") == (0, 0), "nothing lost", rep.totals())
same_as_memcheck(r, memcheck(argv), "sites")
done()
