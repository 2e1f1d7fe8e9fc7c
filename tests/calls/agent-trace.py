#!/usr/bin/env python3
"""tracepad calls --engine agent --trace DIR: the CTF trace written from the agent's ring
records holds exactly the program's calls, with their arguments and return values, and the
same events as the ptrace engine's trace of the same run (times, pids and addresses aside):
one thread, nested and tail calls, longjmp (unwound frames), 4 threads (each thread's calls
in its order, time stamps never going back), and with -c (the summary and the trace, no
lines).  Read with `tracepad dump`."""
import os
import re
import tempfile

from tpcalls import check, done, calls, run, target, TRACEPAD

AGENT = ["--engine", "agent"]
# 2026-11-25 09:49:31.695490562 +0.000000000 PID/TID NAME FIELDS
EVENT = re.compile(r"^\S+ (\d+):(\d+):(\d+)\.(\d+) \+\S+ (\d+)/(\d+) (\w+) ?(.*)$")
HEX = re.compile(r"0x[0-9a-f]+")


class Ev:
    def __init__(self, m):
        self.ns = ((int(m.group(1)) * 60 + int(m.group(2))) * 60 + int(m.group(3))) * 10**9 \
            + int(m.group(4))
        self.pid, self.tid, self.name = int(m.group(5)), int(m.group(6)), m.group(7)
        self.fields = dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', m.group(8)))

    def content(self):
        """What must be equal across engines and runs: no time, pid or address."""
        f = {k: HEX.sub("ADDR", v) for k, v in self.fields.items()
             if k not in ("address", "duration_ns")}
        return (self.name, tuple(sorted(f.items())))

    def int(self, k):
        return int(self.fields[k].strip('"'), 0)


def trace(opts, prog, d, name):
    """Run `tracepad calls OPTS --trace D/NAME -- PROG`: the run and the trace's events."""
    tdir = os.path.join(d, name)
    r = calls(opts + ["--trace", tdir], prog)
    dr = run([TRACEPAD, "dump", tdir])
    evs = [Ev(m) for m in (EVENT.match(ln) for ln in dr.out.splitlines()) if m]
    return r, dr, evs


def calls_of(evs):
    return [e for e in evs if e.name in ("call_entry", "call_return")]


with tempfile.TemporaryDirectory(prefix="tp-agent-trace-") as d:
    # One thread: exactly the program's 300 calls, entry then return, right values, and the
    # ptrace engine's events (process_exit included).
    prog = [target("calls-lazy"), "300", "3"]
    sel = ["-e", "libtpcalls:tpc_add"]
    a, da, ea = trace(AGENT + sel, prog, d, "a1")
    p, dp, ep = trace(sel, prog, d, "p1")
    ca = calls_of(ea)
    want = []
    for i in range(300):
        want += [("call_entry", "%d, %d" % (i, i % 7 + 1)), ("call_return", str(i + i % 7 + 1))]
    got = [(e.name, e.fields.get("args", e.fields.get("retval", "")).strip('"')) for e in ca]
    check(a.rc == 3 and da.rc == 0 and got == want,
          "one thread: the 300 calls' entries and returns, arguments and values", got[:6])
    check(all(e.fields["function"] == '"tpc_add"' and e.fields["object"] == '"libtpcalls.so"'
              and e.int("depth") == 0 for e in ca),
          "one thread: object, function and depth of every event")
    check([e.content() for e in ea] == [e.content() for e in ep] and ep
          and ea[-1].name == "process_exit",
          "one thread: the ptrace engine's trace, event for event",
          "agent %r\nptrace %r" % ([e.content() for e in ea[-3:]], [e.content() for e in ep[-3:]]))
    rets = [e for e in ca if e.name == "call_return"]
    ents = [e for e in ca if e.name == "call_entry"]
    check(all(r.ns - e.ns == r.int("duration_ns") for e, r in zip(ents, rets))
          and all(x.ns <= y.ns for x, y in zip(ea, ea[1:])),
          "one thread: durations are the stamps' differences, stamps never go back")

    # Nested and tail calls, longjmp's unwound frames: the ptrace engine's events.
    multi = target("calls-multi")
    for what, sel in (("nest", ["-e", "libtpcalls:tpc_[abct]*"]),
                      ("longjmp", ["-e", "libtpcalls:tpc_lj*,libtpcalls:tpc_add"])):
        a, _, ea = trace(AGENT + sel, [multi, what], d, "a-" + what)
        p, _, ep = trace(sel, [multi, what], d, "p-" + what)
        check(a.rc == 0 and [e.content() for e in ea] == [e.content() for e in ep]
              and len(calls_of(ea)) >= 10,
              "%s: the ptrace engine's trace, event for event" % what,
              "agent:\n%s\nptrace:\n%s" % ("\n".join(map(str, [e.content() for e in ea[:12]])),
                                           "\n".join(map(str, [e.content() for e in ep[:12]]))))
        if what == "longjmp":
            check(any(e.fields.get("retval") == '"<unwound>"' for e in ea),
                  "longjmp: frames left by longjmp are call_return \"<unwound>\"")

    # 4 threads: each thread's calls in its order with its values; the trace's stamps never
    # go back although the threads' records come from 4 rings.
    COUNTS = [300 * (k + 2) for k in range(4)]
    a, _, ea = trace(AGENT + ["-e", "libtpcalls:tpc_add"], [multi, "threads"], d, "a4")
    th = {int(m.group(2)): int(m.group(1)) for m in
          re.finditer(r"^thread (\d+) tid (\d+) calls (\d+) sum (\d+)$", a.out, re.M)}
    per = {}
    for e in calls_of(ea):
        per.setdefault(e.tid, []).append(e)
    check(a.rc == 0 and sorted(per) == sorted(th) and len(th) == 4,
          "threads: events of exactly the program's 4 threads", a)
    for tid, k in sorted(th.items()):
        got = [(e.name, e.fields.get("args", e.fields.get("retval"))) for e in per.get(tid, [])]
        want = []
        for j in range(COUNTS[k]):
            want += [("call_entry", '"%d, %d"' % (k + 1, j)), ("call_return", '"%d"' % (k + 1 + j))]
        check(got == want, "threads: thread %d: its %d calls in order" % (k, COUNTS[k]), got[:4])
    check(all(x.ns <= y.ns for x, y in zip(ea, ea[1:])),
          "threads: the trace's stamps never go back")

    # -c --trace: the summary, no line, the whole trace (the bench's row beside uftrace
    # record).
    prog = [target("calls-lazy"), "2000"]
    a, _, ea = trace(AGENT + ["-c", "-e", "libtpcalls:tpc_add"], prog, d, "ac")
    check(a.rc == 0 and not a.calls and re.search(r"^\s+2000\s+0\s.*tpc_add$", a.text, re.M)
          and [e.name for e in calls_of(ea)] == ["call_entry", "call_return"] * 2000
          and [e.int("depth") for e in ea if e.name == "call_return"] == [0] * 2000,
          "-c --trace: the summary and 2000 calls in the trace", a.text[-400:])
done()
