#!/usr/bin/env python3
"""e2e: both engines agree to the instruction on compiled code (compute -O0 and -O2):
--start work (sieve, CRC, libc's qsort calling back into the program), --start main --stop
work, and the mnemonic and function histograms of the region; the program's output and exit
status are unchanged.  And every engine counts a region with two cpuids exactly: in this
VM their single-step trap comes one instruction late (docs/INTERNALS.md)."""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import ENGINES, Checks, cc, count, native, target  # noqa: E402

c = Checks("agree")


def histogram(rep, by, what):
    h = rep.get("histogram")
    if not c.ok(isinstance(h, dict) and h.get("by") == by and isinstance(h.get("entries"), list),
                what + ": histogram by " + by, h):
        return None
    entries = h["entries"]
    keys = [e.get("key") for e in entries]
    counts = [e.get("count") for e in entries]
    c.ok(all(isinstance(k, str) and k for k in keys) and len(set(keys)) == len(keys),
         what + ": histogram keys are distinct strings", keys[:20])
    c.ok(all(isinstance(n, int) and n > 0 for n in counts), what + ": histogram counts > 0",
         counts[:20])
    c.ok(counts == sorted(counts, reverse=True), what + ": histogram sorted by count", counts)
    c.eq(sum(counts), rep["instructions"], what + ": histogram sums to the total")
    return {e["key"]: e["count"] for e in entries}


for opt in ("O0", "O2"):
    argv = [target("compute-" + opt), "7"]
    nat = native(argv)
    c.ok(nat.rc == 0 and nat.out.startswith("compute 7 checksum "), "native compute-" + opt, nat)
    reps, hists = {}, {}
    for engine in ENGINES:
        for by in ("mnemonic", "function"):
            what = "%s compute-%s --start work --by %s" % (engine, opt, by)
            r = count(argv, engine=engine, start="work", by=by)
            rep = c.report(r, what, engine, {"start": "work", "stop": None})
            c.same_as_native(r, nat, what)
            if not rep:
                continue
            c.ok(rep["instructions"] > 10000, what + ": the region's work is counted",
                 rep["instructions"])
            c.eq(len(rep["threads"]), 1, what + ": one thread counted")
            reps[engine, by] = rep["instructions"]
            hists[engine, by] = histogram(rep, by, what)
        if hists.get((engine, "mnemonic")):
            mn = hists[engine, "mnemonic"]
            c.ok(mn.get("call", 0) > 0 and mn.get("ret", 0) > 0,
                 "%s compute-%s: the mnemonic histogram has call and ret" % (engine, opt),
                 sorted(mn.items(), key=lambda kv: -kv[1])[:15])
        if hists.get((engine, "function")):
            fn = hists[engine, "function"]
            c.ok(any("work" in k for k in fn) and any("cmp_keys" in k for k in fn)
                 and any("qsort" in k or "msort" in k for k in fn),
                 "%s compute-%s: functions work, cmp_keys and libc's sort are named"
                 % (engine, opt), list(fn)[:20])
    for by in ("mnemonic", "function"):
        c.eq(reps.get(("trapflag", by)), reps.get(("ptrace", by)),
             "compute-%s --start work --by %s: engines agree on the count" % (opt, by))
        c.eq(hists.get(("trapflag", by)), hists.get(("ptrace", by)),
             "compute-%s --start work --by %s: engines agree on the histogram" % (opt, by))
    c.eq(reps.get(("ptrace", "mnemonic")), reps.get(("ptrace", "function")),
         "compute-%s: ptrace counts the same with --by mnemonic and --by function" % opt)

    # --top N: the N largest entries only.
    r = count(argv, engine="trapflag", start="work", by="mnemonic", top=3)
    rep = c.report(r, "trapflag compute-%s --top 3" % opt, "trapflag")
    if rep and hists.get(("trapflag", "mnemonic")):
        full = sorted(hists["trapflag", "mnemonic"].values(), reverse=True)
        got = [e.get("count") for e in (rep.get("histogram") or {}).get("entries", [])]
        c.eq(got, full[:3], "compute-%s --top 3: the three largest counts" % opt)

    # A region cut short by --stop: main up to (not into) work, strtoul included.
    counts = {}
    for engine in ENGINES:
        what = "%s compute-%s --start main --stop work" % (engine, opt)
        r = count(argv, engine=engine, start="main", stop="work")
        rep = c.report(r, what, engine, {"start": "main", "stop": "work"})
        c.same_as_native(r, nat, what)
        if rep:
            counts[engine] = rep["instructions"]
            c.ok(0 < rep["instructions"] < 20000, what + ": strtoul counted, work not",
                 rep["instructions"])
    c.eq(counts.get("trapflag"), counts.get("ptrace"),
         "compute-%s --start main --stop work: engines agree" % opt)

# cpuid in the program's own code, under the trapflag engine's in-process stepper too: 11
# instructions (push, xor, xor, cpuid, nop, mov, xor, cpuid, mov, pop, ret).
CPUID_S = """
.globl work
.type work, @function
work:
  push %rbx
  xor %eax, %eax
  xor %ecx, %ecx
  cpuid
  nop
  mov $1, %eax
  xor %ecx, %ecx
  cpuid
  mov %eax, %eax
  pop %rbx
  ret
.size work, . - work
.globl main
.type main, @function
main:
  sub $8, %rsp
  call work
  add $8, %rsp
  xor %eax, %eax
  ret
.section .note.GNU-stack,"",@progbits
"""
with tempfile.TemporaryDirectory(prefix="tp-agree-") as tmp:
    exe = cc(tmp, "cpuid.S", CPUID_S)
    if c.ok(exe, "cc builds cpuid"):
        for engine in ENGINES + ("dbt",):
            r = count([exe], engine=engine, start="work")
            rep = c.report(r, engine + " cpuid --start work", engine,
                           {"start": "work", "stop": None})
            if rep:
                c.eq(rep["instructions"], 11, engine + " cpuid --start work: 11 instructions")

c.done()
