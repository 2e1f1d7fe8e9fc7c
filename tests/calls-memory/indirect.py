#!/usr/bin/env python3
"""memory plugin, test 2: every kind memcheck tells apart (indirect.c): lost list heads whose
nodes are indirectly lost, a lost ring, a lost mmapped block, interior pointers (possibly
lost), blocks reachable from globals, from main's stack and from a second thread's stack.
Each is reported under its own function with the right bytes, and the totals per kind equal
valgrind memcheck's on the same program."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memlib import check, done, memcheck, native, same_as_memcheck, target, tracepad  # noqa: E402

# kind, function named by the backtrace, direct bytes, blocks, indirect bytes (of the groups
# of that kind naming the function, summed).
EXPECT = [
    ("definitely lost", "lose_list", 16, 1, 480),
    ("definitely lost", "lose_ring", 48, 1, 144),
    ("definitely lost", "lose_big", 300000, 1, 40),
    ("definitely lost", "lose_interior", 24, 1, 64),
    ("definitely lost", "thread_leak", 55, 1, 0),
    ("indirectly lost", "lose_list", 480, 10, 0),
    ("indirectly lost", "lose_ring", 144, 3, 0),
    ("indirectly lost", "lose_big", 40, 1, 0),
    ("indirectly lost", "lose_interior", 64, 1, 0),
    ("possibly lost", "keep_interior", 264, 2, 0),
    ("still reachable", "keep_list", 16 + 5 * 48, 6, 0),
    ("still reachable", "keep_big", 200032, 2, 0),
    ("still reachable", "thread_main", 333, 1, 0),
]
WHY = {
    "lose_list": "a lost list head, its 10 nodes indirectly lost",
    "lose_ring": "a lost ring of 4: one leads, 3 indirectly lost",
    "lose_big": "a lost mmapped block (its mapping is no root) and the block it points to",
    "lose_interior": "a lost block pointing into another one's interior",
    "thread_leak": "the second thread's leak, in its own arena",
    "keep_interior": "a global pointing into a block's middle, and what that block points to",
    "keep_list": "a list held by a global",
    "keep_big": "a kept mmapped block and what it points to",
    "thread_main": "a block only the second thread's stack holds",
}

argv = [target("mem-indirect")]
nat = native(argv)
r = tracepad(argv)
rep = r.report
check(r.rc == 0 and nat.rc == 0 and r.out == nat.out,
      "exit status and output unchanged under tracepad", r)
for kind, fn, nbytes, blocks, indirect in EXPECT:
    g = rep.find(kind, fn)
    got = (sum(x["bytes"] for x in g), sum(x["blocks"] for x in g),
           sum(x["indirect"] for x in g))
    check(got == (nbytes, blocks, indirect),
          "%s: %d bytes in %d blocks %s (%d indirect), by %s" %
          (WHY[fn], nbytes, blocks, kind, indirect, fn), "got %r in %r" % (got, g or rep))
stack77 = [g for g in rep.groups if g["kind"] == "still reachable" and g["bytes"] == 77
           and len(g["frames"]) > 1 and ":main+" in g["frames"][1]]
check(len(stack77) == 1, "a block only main's stack holds (77 bytes) is still reachable",
      rep.groups)
check(rep.kinds.get("definitely lost") == (300143, 5) and
      rep.kinds.get("indirectly lost") == (728, 15),
      "definitely lost: 300143 bytes in 5 blocks, indirectly lost: 728 in 15", rep.totals())
# A second thread is alive at exit: tracepad does not run glibc's exit-time frees then (it
# says so), where memcheck kills the thread first and runs them.
check("glibc's exit-time frees were not run" in r.report.text,
      "indirect: the report says the exit-time frees were not run (2 threads at exit)", r)
same_as_memcheck(r, memcheck(argv, freeres=False), "indirect")
done()
