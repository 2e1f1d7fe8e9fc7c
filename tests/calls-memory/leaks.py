#!/usr/bin/env python3
"""memory plugin, test 1: a program with exactly 3 leaks (100, 101 and 102 bytes) among
thousands of blocks freed through every allocator entry (malloc, calloc, realloc with its
NULL and 0 cases, reallocarray, posix_memalign, aligned_alloc, memalign, valloc, free): those 3
and only those are definitely lost, each with a backtrace naming its leaking function, stdout's
buffer is freed at exit by glibc's __libc_freeres (still reachable with freeres=no), and the
totals equal memcheck's on the same program, with and without its exit-time frees."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memlib import KINDS, check, done, memcheck, native, same_as_memcheck, target, tracepad  # noqa: E402

ROUNDS = 1000
LEAKS = [(100, "leak_a", "malloc"), (101, "leak_b", "calloc"), (102, "leak_c", "realloc")]

for exe in ("mem-leak3", "mem-leak3-O0"):
    argv = [target(exe), str(ROUNDS)]
    nat = native(argv)
    r = tracepad(argv)
    rep = r.report
    what = exe
    check(r.rc == 0 and r.out == nat.out and nat.rc == 0,
          what + ": exit status and output unchanged under tracepad", r)
    check(rep.kinds.get("definitely lost") == (303, 3),
          what + ": definitely lost: 303 bytes in 3 blocks", rep)
    lost = [g for g in rep.groups if g["kind"] == "definitely lost"]
    check(sorted((g["bytes"], g["blocks"]) for g in lost) == [(100, 1), (101, 1), (102, 1)],
          what + ": exactly the 3 leaks are reported as definitely lost, one group each", lost)
    for size, fn, alloc in LEAKS:
        g = rep.find("definitely lost", fn)
        check(len(g) == 1 and g[0]["bytes"] == size and g[0]["blocks"] == 1,
              "%s: the %d-byte leak's backtrace names %s" % (what, size, fn), g or lost)
        check(len(g) == 1 and alloc in g[0]["frames"][0] and "main" in " ".join(g[0]["frames"]),
              "%s: ... starting at libc's %s, called from main" % (what, alloc), g)
    check(rep.kinds.get("indirectly lost") == (0, 0) and rep.kinds.get("possibly lost") == (0, 0),
          what + ": nothing indirectly or possibly lost", rep.totals())
    check(rep.kinds.get("still reachable") == (0, 0),
          what + ": stdout's buffer freed at exit (__libc_freeres): nothing still reachable",
          [g for g in rep.groups if g["kind"] == "still reachable"])
    check(not [g for g in rep.groups if g not in lost], what + ": no other block is reported",
          rep.groups)
    # A round: 10 allocations (malloc, calloc, realloc(NULL, n), 2 resizing reallocs,
    # posix_memalign, aligned_alloc, memalign, malloc or valloc, malloc) and 10 frees (7 free(),
    # the 2 reallocs, realloc(p, 0)).  Outside the rounds: the 3 leaks, leak_c's first block
    # (realloc'd), stdout's buffer, failures()' one block and leak_a's 64 freed ones; 5
    # failing calls count for nothing.  realloc(NULL, n) and reallocarray call malloc and
    # realloc inside glibc: counted once.
    # stdout's buffer is freed by __libc_freeres at exit.
    want = (ROUNDS * 10 + 70, ROUNDS * 10 + 67)
    check(b"5 failed calls" in nat.out, what + ": the target saw its 5 failing calls", nat.out)
    check(rep.usage is not None and rep.usage[:2] == want,
          what + ": every allocation and free counted exactly once, failures not at all "
          "(%d allocs, %d frees)" % want, rep.usage)
    check(rep.in_use == (303, 3), what + ": in use at exit: 303 bytes in 3 blocks", rep.in_use)
    same_as_memcheck(r, memcheck(argv), what)

    # Without the exit-time frees: stdout's buffer is still in use, and reachable.
    r = tracepad(argv, plugin="memory:freeres=no,kinds=all")
    rep = r.report
    reach = rep.find("still reachable", "_IO_file_doallocate")
    check(len(reach) == 1 and reach[0]["bytes"] == 4096 and reach[0]["blocks"] == 1,
          what + ", freeres=no: stdout's buffer (4096 bytes, a pipe) is still reachable, "
          "not a leak", [g for g in rep.groups if g["kind"] == "still reachable"])
    check(rep.usage is not None and rep.usage[:2] == (want[0], want[1] - 1) and
          rep.in_use == (4096 + 303, 4),
          what + ", freeres=no: one free less, 4399 bytes in 4 blocks in use at exit",
          (rep.usage, rep.in_use))
    same_as_memcheck(r, memcheck(argv, freeres=False), what + ", freeres=no")

# The plugin's arguments: summary only, a shorter backtrace, and a bad one.
argv = [target("mem-leak3"), "100"]
r = tracepad(argv, plugin="memory:summary")
check(r.rc == 0 and r.report.kinds.get("definitely lost") == (303, 3) and not r.report.groups,
      "--plugin memory:summary: the totals and no group", r)
r = tracepad(argv, plugin="memory:depth=2")
lost = r.report.find("definitely lost", "leak_a")
check(r.rc == 0 and len(lost) == 1 and len(lost[0]["frames"]) == 2
      and all(len(g["frames"]) <= 2 for g in r.report.groups),
      "--plugin memory:depth=2: backtraces of 2 frames (the allocator and its caller)",
      lost or r)
# memcheck's default --show-leak-kinds: records of definite and possible leaks only.
r = tracepad(argv, plugin="memory:freeres=no")
check(r.rc == 0 and {g["kind"] for g in r.report.groups} == {"definitely lost"} and
      r.report.kinds.get("still reachable") == (4096, 1),
      "--plugin memory: records of lost blocks only, the reachable one in the summary", r)
r = tracepad(argv, plugin="memory:kinds=reachable+definite,freeres=no")
check(r.rc == 0 and {g["kind"] for g in r.report.groups} == {"definitely lost",
                                                              "still reachable"},
      "--plugin memory:kinds=reachable+definite: those kinds' records", r)
r = tracepad(argv, plugin="memory:kinds=lost")
check(r.rc != 0 and "kinds=" in r.err and not r.out,
      "--plugin memory:kinds=lost: a clear error, the program not run", r)
# JSON: one object a process, the same figures as the text.
text = tracepad(argv, plugin="memory:kinds=all").report
r = tracepad(argv, plugin="memory:json,kinds=all")
try:
    j = json.loads([ln for ln in r.report.text.splitlines()
                    if ln.startswith('{"memory": ')][0])["memory"]
except (ValueError, KeyError, IndexError) as e:
    j = None
    err = e
check(j is not None and j["allocs"] == text.usage[0] and j["frees"] == text.usage[1] and
      (j["in_use"]["bytes"], j["in_use"]["blocks"]) == text.in_use and
      {k: (v["bytes"], v["blocks"]) for k, v in j["kinds"].items()} == text.totals() and
      sorted((g["kind"], g["bytes"], g["blocks"]) for g in j["records"]) ==
      sorted((g["kind"], g["bytes"], g["blocks"]) for g in text.groups) and
      all(g["backtrace"] and "symbol" in g["backtrace"][0] for g in j["records"]),
      "--plugin memory:json: one JSON object with the text report's figures and records",
      j if j is not None else (err, r))
r = tracepad(argv, plugin="memory:depth=lots")
check(r.rc != 0 and "depth" in r.err and not r.out,
      "--plugin memory:depth=lots: a clear error, the program not run", r)
done()
