#!/usr/bin/env python3
"""tracepad calls across fork and exec, with the engine of argv[2]: with -f, the calls of the
parent, of the child and of the program the child execs, each attributed to the pid the
program printed; without -f only the parent's, and the child still runs to its end (never
killed by a SIGTRAP).  A static program exec'd too."""
import re

from tpcalls import ENGINE, check, done, calls, run, target

multi = target("calls-multi")
lazy = target("calls-lazy")
PAT = ["-e", "libtpcalls:tpc_add"]


def pids(out):
    parent = re.search(r"^parent (\d+)$", out, re.M)
    child = re.search(r"^child (\d+) sum (\d+)$", out, re.M)
    exe = re.search(r"^pid (\d+)$", out, re.M)
    return (int(parent.group(1)) if parent else None, int(child.group(1)) if child else None,
            int(exe.group(1)) if exe else None)


def program_ok(r):
    """The whole family ran to its end: the child's sum, the exec'd program's, the parent's."""
    return (r.rc == 0 and "child status 0\n" in r.out and "parent sum %d\n" % (
        sum(1 + i for i in range(30)) + sum(101 + i for i in range(5))) in r.out
            and re.search(r"^child \d+ sum %d$" % sum(2 + i for i in range(20)), r.out, re.M)
            and "calls 10 sum %d\n" % sum(i + i % 7 + 1 for i in range(10)) in r.out)


nat = run([multi, "forkexec", lazy])
check(program_ok(nat), "native run", nat)

E = ENGINE + ": "
for rep in range(2):
    r = calls(["-f"] + PAT, [multi, "forkexec", lazy])
    check(program_ok(r), E + "-f #%d: parent, child and exec'd program ran to their end" % rep, r)
    parent, child, exe = pids(r.out)
    check(child == exe and parent and child != parent,
          E + "-f #%d: the exec'd program runs in the child's pid" % rep, r.out)
    cs = r.calls
    check(not r.unparsed(), E + "-f #%d: every line is a call line" % rep,
          "\n".join(r.unparsed()[:10]))
    mine = [c for c in cs if c.tid == parent]
    check([c.args for c in mine] == [[1, i] for i in range(30)] + [[1, 100 + i] for i in range(5)]
          and all(c.retint == sum(c.args) for c in mine),
          E + "-f #%d: the parent's 35 calls under its pid, with their values" % rep,
          "%d lines: %r" % (len(mine), mine[:5]))
    theirs = [c for c in cs if c.tid == child]
    want = [[2, i] for i in range(20)] + [[i, i % 7 + 1] for i in range(10)]
    check([c.args for c in theirs] == want and all(c.retint == sum(c.args) for c in theirs),
          E + "-f #%d: the child's 20 calls then the exec'd program's 10 under the child's pid" % rep,
          "%d lines: %r" % (len(theirs), theirs[:5]))
    check(len(cs) == 65, E + "-f #%d: no other line" % rep, "%d lines" % len(cs))
    r = calls(["-f", "-c", "--json"] + PAT, [multi, "forkexec", lazy])
    s = r.summary()
    parent, child, _ = pids(r.out)
    tot = sum(f.get("calls", 0) for f in (s or {}).get("functions", []) if f.get("function")
              == "tpc_add")
    check(program_ok(r) and s and tot == 65 and sorted(s.get("pids", [])) == sorted(
        [parent, child]), E + "-f -c --json #%d: 65 calls, pids of parent and child" % rep, r)

for rep in range(2):
    r = calls(PAT, [multi, "forkexec", lazy])
    check(program_ok(r), E + "no -f #%d: the child and its exec'd program ran to their end "
          "(no SIGTRAP)" % rep, r)
    parent, child, _ = pids(r.out)
    cs = r.calls
    check(len(cs) == 35 and all(c.tid == parent for c in cs)
          and [c.args for c in cs] == [[1, i] for i in range(30)] + [[1, 100 + i]
                                                                   for i in range(5)],
          E + "no -f #%d: only the parent's 35 calls" % rep, "%d lines: %r" % (len(cs), cs[-3:]))
# exec from a second thread: the kernel ends the other threads and gives the new image the
# process's pid, which -f must follow.
nat = run([multi, "threxec", lazy])
check(nat.rc == 0 and "calls 10 sum 79\n" in nat.out, "threxec: native run", nat)
for opts in (["-f"], []):
    what = E + "threxec " + (" ".join(opts) or "without -f")
    r = calls(opts + PAT, [multi, "threxec", lazy])
    pid = re.search(r"^threxec (\d+)$", r.out, re.M)
    pid2 = re.search(r"^pid (\d+)$", r.out, re.M)
    check(r.rc == 0 and pid and pid2 and pid.group(1) == pid2.group(1)
          and r.out.split("\n", 2)[2:] == nat.out.split("\n", 2)[2:],
          what + ": the program and its exec'd image ran as natively", r)
    if opts and pid:
        pid = int(pid.group(1))
        got = [(c.tid == pid, c.args, c.retint) for c in r.calls]
        want = [(True, [7, 1], 8), (False, [8, 1], 9)] + [(True, [i, i % 7 + 1], i + i % 7 + 1)
                                                         for i in range(10)]
        check(got == want, what + ": the thread's call, then the new image's 10 under the pid",
              "got  %r\nwant %r" % (got, want))
# The child execs a static program: hooked at its main under the agent engine.
static = target("calls-static")
nat = run([multi, "forkexec", static])
check(program_ok(nat), "static exec: native run", nat)
r = calls(["-f", "-e", "libtpcalls:tpc_add,calls-static:tpc_add"],
          [multi, "forkexec", static])
parent, child, exe = pids(r.out)
theirs = [(c.args, c.retint, c.object) for c in r.calls if c.tid == child]
want = [([2, i], 2 + i, "libtpcalls.so") for i in range(20)] + [
    ([i, i % 7 + 1], i + i % 7 + 1, "calls-static") for i in range(10)]
check(program_ok(r) and child == exe and theirs == want
      and len([c for c in r.calls if c.tid == parent]) == 35,
      "%s: static exec -f: the child's 20 calls, then the static program's 10" % ENGINE,
      "got  %r\nwant %r" % (theirs[18:23], want[18:23]))
done()
