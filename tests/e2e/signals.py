#!/usr/bin/env python3
"""e2e: signals inside a counted region.  sighandler's region work_with_signal() raises
SIGUSR1, executes int3, or raises SIGTRAP; the program's own handler runs tp_loop(N).  The
handler's instructions are counted (count(N) - count(0) = 2N exactly), both engines agree,
the program's handlers run as natively, also when they run several times.  sigmask: a program blocking SIGTRAP reads it back as
blocked and behaves as natively under both engines."""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import ENGINES, Checks, count, native, target  # noqa: E402

c = Checks("signals")
N = 400
REGION = {"start": "work_with_signal", "stop": None}

for opt in ("O0", "O2"):
    prog = target("sighandler-" + opt)
    counts = {}
    for mode in ("none", "usr1", "int3", "trap"):
        for n in (0, N):
            argv = [prog, mode, str(n)]
            nat = native(argv)
            ran = 0 if mode == "none" else 1
            c.ok(nat.rc == 0 and nat.out.endswith("handler ran %d times\n" % ran),
                 "native sighandler-%s %s %d" % (opt, mode, n), nat)
            for engine in ENGINES:
                what = "%s sighandler-%s %s %d --start work_with_signal" % (engine, opt, mode, n)
                r = count(argv, engine=engine, start="work_with_signal")
                rep = c.report(r, what, engine, REGION)
                c.same_as_native(r, nat, what)
                counts[engine, mode, n] = rep["instructions"] if rep else None
    for mode in ("none", "usr1", "int3", "trap"):
        for engine in ENGINES:
            a, b = counts[engine, mode, 0], counts[engine, mode, N]
            if a is None or b is None:
                continue
            want = 0 if mode == "none" else 2 * N
            c.eq(b - a, want, "%s sighandler-%s %s: handler's tp_loop(%d) adds %d instructions"
                 % (engine, opt, mode, N, want))
        for n in (0, N):
            c.eq(counts["trapflag", mode, n], counts["ptrace", mode, n],
                 "sighandler-%s %s %d: engines agree" % (opt, mode, n))
    for engine in ENGINES:
        base = counts[engine, "none", 0]
        for mode in ("usr1", "int3", "trap"):
            got = counts[engine, mode, 0]
            if base is not None and got is not None:
                # int3 itself, the handler and the restorer's mov+syscall at least.
                c.ok(got >= base + 4, "%s sighandler-%s %s: delivery and handler counted"
                     % (engine, opt, mode), "none: %d, %s: %d" % (base, mode, got))

# main() under each engine (the target has tp_step_* symbols, so without --start only those
# regions would count), with the program's SIGTRAP handler in use, once and three times:
# stepping a handler that blocks SIGTRAP must not reset it to SIG_DFL.
for mode in ("int3", "trap"):
    for times in ("1", "3"):
        argv = [target("sighandler-O2"), mode, "10", times]
        nat = native(argv)
        c.ok(nat.rc == 0 and "handler ran %s times" % times in nat.out,
             "native sighandler-O2 %s x%s" % (mode, times), nat)
        for engine in ENGINES:
            what = "%s sighandler-O2 %s x%s --start main" % (engine, mode, times)
            r = count(argv, engine=engine, start="main")
            rep = c.report(r, what, engine, {"start": "main", "stop": None})
            c.same_as_native(r, nat, what)
            c.ok(rep and rep["instructions"] > 100, what + ": main's instructions counted",
                 rep and rep["instructions"])

# sigmask: SIGTRAP reads back as blocked while the program has it blocked.
argv = [target("sigmask")]
nat = native(argv)
c.ok(nat.rc == 0 and "blocked: sigprocmask SIGTRAP blocked SIGUSR1 blocked; pthread_sigmask "
     "SIGTRAP blocked; usr1 ran 0" in nat.out and "restored: sigprocmask SIGTRAP unblocked"
     in nat.out, "native sigmask", nat)
counts = {}
for engine in ENGINES:
    for start in (None, "main"):
        what = "%s sigmask %s" % (engine, "--start main" if start else "whole program")
        r = count(argv, engine=engine, start=start)
        rep = c.report(r, what, engine, {"start": "main", "stop": None} if start else None)
        c.same_as_native(r, nat, what)
        if rep and start:
            counts[engine] = rep["instructions"]
c.eq(counts.get("trapflag"), counts.get("ptrace"), "sigmask --start main: engines agree")

c.done()
