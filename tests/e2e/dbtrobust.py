#!/usr/bin/env python3
"""e2e: the dbt engine where programs make a code cache's life hard: code written at run
time without mprotect, a code cache too small for the program (flushed under load, with
threads running in it), bytes the decoder does not know, a program that sets %gs, and
signals that arrive while the runtime's own code runs.  Counts stay exact (the ptrace
engine's, corrected as tests/e2e/dbt.py does) and outputs native."""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import Checks, count, native, target  # noqa: E402

c = Checks("dbt-robust")


def ptrace_truth(argv, what):
    """The ptrace engine's count, each cpuid's late trap and the doubled exit taken out."""
    r = count(argv, engine="ptrace", by="mnemonic", top=0)
    rep = c.report(r, what + " (ptrace)", "ptrace")
    if not rep:
        return None
    cpuid = sum(e["count"] for e in rep["histogram"]["entries"] if e["key"] == "cpuid")
    return rep["instructions"] + cpuid - 1


def check(argv, what, exact=True):
    """Native output and status, no warning, and (when @exact) the ptrace engine's count."""
    nat = native(argv)
    r = count(argv, engine="dbt")
    rep = c.report(r, what, "dbt")
    c.same_as_native(r, nat, what)
    if not rep:
        return r, None
    c.ok("warning" not in rep, what + ": no warning", rep.get("warning"))
    if exact:
        want = ptrace_truth(argv, what)
        if want is not None:
            c.eq(rep["instructions"], want, what + ": the ptrace engine's count")
    return r, rep


# 1. Code written at run time on RWX pages, without mprotect: f is rewritten in place 300
# times and called directly and from g on another page (a direct call: its link must be
# undone), then its code comes in through read(2).
r, _ = check([target("jit")], "jit: code rewritten in place")
c.eq(r.out, "jit 300 rounds, sum 1138760, wrong 0\n", "jit: every result right")

c.done()
