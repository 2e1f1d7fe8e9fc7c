#!/usr/bin/env python3
"""e2e: SIGTRAPs that are not the stepper's, under both engines (issue 14: a trap the
trapflag agent could not classify went to the program's default action and killed gzip).  The
trapkinds target gets, 3 times, a SIGTRAP it queued itself with si_code TRAP_BRKPT (what the
kernel says of an icebp or of a step without DR6.BS) or TRAP_TRACE (a step's code), both with
an si_addr that is not the pc; one sent by kill() (SI_USER); an icebp (int1).  With its own
SA_SIGINFO handler, the handler sees each one as natively (same si_code, same si_addr); with
none, the program dies of SIGTRAP as natively, and the trapflag report's fatal_trap says
which trap the agent passed on (signal, si_code, si_addr or si_pid, pc).  Whole program and
--start main, whose counts agree between the engines (each trap's instruction, the handler,
its return)."""
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import ENGINES, Checks, count, native, target  # noqa: E402

c = Checks("trapkinds")
PROG = target("trapkinds")
FAKE_ADDR = 0x5CA1AB1E
# si_code the program gets, and what its si_addr word must be in the report (None: the pc)
KINDS = {"brkpt": (1, FAKE_ADDR), "trace": (2, FAKE_ADDR), "user": (0, "pid"),
         "icebp": (1, None)}

for kind, (code, addr) in KINDS.items():
    for disp in ("handler", "default"):
        argv = [PROG, kind, disp]
        nat = native(argv)
        if disp == "handler":
            good = nat.rc == 0 and nat.out.endswith("handler ran 3 times\n") and \
                nat.out.count("si_code ") == 3
        else:
            good = nat.rc == -5 and nat.out == "%s default\n" % kind
        c.ok(good, "native trapkinds %s %s" % (kind, disp), nat)
        counts = {}
        for engine, start in ((e, s) for e in ENGINES for s in (None, "main")):
            what = "%s trapkinds %s %s%s" % (engine, kind, disp, " --start main" if start else "")
            r = count(argv, engine=engine, start=start)
            rep = c.report(r, what, engine,
                           {"start": "main", "stop": None} if start else None)
            c.same_as_native(r, nat, what)
            if not rep:
                continue
            if start:
                counts[engine] = rep["instructions"]
            if engine != "trapflag":
                continue
            ft = rep.get("fatal_trap")
            if disp == "handler":
                c.eq(ft, None, what + ": no trap given to a default action")
                continue
            if not c.ok(isinstance(ft, dict), what + ": the report names the fatal trap", rep):
                continue
            want_addr = rep["pid"] if addr == "pid" else ft["pc"] if addr is None else addr
            got_addr = ft["si_addr"] & 0xFFFFFFFF if addr == "pid" else ft["si_addr"]
            c.eq((ft["signo"], ft["si_code"], got_addr, ft["traps"]), (5, code, want_addr, 1),
                 what + ": fatal trap: signal 5, si_code %d, %s" % (
                     code, "si_pid the program's" if addr == "pid" else
                     "si_addr the pc" if addr is None else "si_addr the value sent"), ft)
            c.ok("si_code %d" % code in ft["text"] and "default action" in ft["text"],
                 what + ": fatal trap in words", ft["text"])
        c.eq(counts.get("trapflag"), counts.get("ptrace"),
             "trapkinds %s %s --start main: engines agree" % (kind, disp))

c.done()
