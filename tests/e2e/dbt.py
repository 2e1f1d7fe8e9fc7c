#!/usr/bin/env python3
"""e2e: the dbt engine (the program runs in src/dbt's code cache) counts whole programs as
the ptrace engine does, and leaves their output and exit status unchanged.

Two artefacts of single-stepping on this machine are taken out of the ptrace count before
comparing (docs/INTERNALS.md, "The code cache"): the step over `cpuid` (a VM exit here)
reports its trap one instruction late, so each executed cpuid hides the instruction after
it; and the exit syscall is counted twice.  The same corrected count is checked on a
hand-written program whose count is known (3 instructions, no cpuid)."""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import Checks, count, native, target  # noqa: E402

c = Checks("dbt")


def ptrace_truth(argv, what):
    """The ptrace engine's count with the two stepping artefacts taken out."""
    r = count(argv, engine="ptrace", by="mnemonic", top=0)
    rep = c.report(r, what + " (ptrace)", "ptrace")
    if not rep:
        return None
    cpuid = sum(e["count"] for e in rep["histogram"]["entries"] if e["key"] == "cpuid")
    return rep["instructions"] + cpuid - 1


def check(argv, what):
    nat = native(argv)
    r = count(argv, engine="dbt")
    rep = c.report(r, what, "dbt")
    c.same_as_native(r, nat, what)
    if not rep:
        return
    c.ok("warning" not in rep, what + ": no warning", rep.get("warning"))
    c.ok(len(rep["threads"]) == 1, what + ": one thread", rep["threads"])
    want = ptrace_truth(argv, what)
    if want is not None:
        c.eq(rep["instructions"], want, what + ": the ptrace engine's count")


# A program whose count is known: mov, xor, syscall (exit_group).
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    src, exe = os.path.join(tmp, "exit.S"), os.path.join(tmp, "exit3")
    with open(src, "w") as f:
        f.write(".globl _start\n_start:\n mov $60, %eax\n mov $7, %edi\n syscall\n")
    built = subprocess.run(["cc", "-nostdlib", "-static", "-o", exe, src]).returncode == 0
    if c.ok(built, "cc builds a 3-instruction static program"):
        r = count([exe], engine="dbt")
        rep = c.report(r, "exit3", "dbt")
        if rep:
            c.eq(rep["instructions"], 3, "exit3: 3 instructions")
            c.eq(rep["exit"], {"status": 7}, "exit3: exit status 7")

check(["/bin/true"], "/bin/true")
check([target("compute-O2")], "compute-O2")
check([target("compute-O0")], "compute-O0")
check([target("sigmask")], "sigmask")
check([target("forkexec"), "fork"], "forkexec fork")
check([target("forkexec"), "vfork"], "forkexec vfork")

# What the engine cannot run yet is refused before the program starts.
r = count([target("threads-O2"), "2"], engine="dbt")
c.eq(r.rc, 2, "threads: refused with status 2")
c.ok("does not run threads yet" in r.err and "threads" not in r.out, "threads: says why, "
     "and the program did not run", r)

c.done()
