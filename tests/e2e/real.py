#!/usr/bin/env python3
"""e2e: programs nobody here wrote (Debian's coreutils, stripped: no .symtab).  Whole-program
counts under both engines with the output unchanged (/bin/true, /bin/ls /); trapflag reports
its ptrace-stepped `startup` and where it took over; --start main agrees between the
engines; nothing of tracepad is counted (--by object names no tracepad or Zydis object): the
ptrace engine maps nothing into a whole program, and the trapflag engine injects its agent at
the program's entry point, so that the two agree on every object but the dynamic loader and
libc, where the injection leaves a footprint of a few hundred instructions.  The default
engine (dbt) counts /bin/true exactly as the ptrace engine, with nothing of tracepad; the
trapflag engine's footprint is smaller than what valgrind lackey sees an empty LD_PRELOAD
cost (issue 15: tracepad's own work is never counted)."""
import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import ENGINES, TARGETS, Checks, count, native  # noqa: E402

c = Checks("real")


def prog(name):
    return shutil.which(name) or c.bail("%s not installed (coreutils)" % name)


true, ls, echo, basename = prog("true"), prog("ls"), prog("echo"), prog("basename")


def no_agent_objects(rep, what):
    h = rep.get("histogram") or {}
    keys = [e.get("key", "") for e in h.get("entries", [])]
    c.ok(h.get("by") == "object" and keys, what + ": histogram by object", h)
    c.ok(not any("tracepad" in k or "Zydis" in k for k in keys),
         what + ": no instruction of tracepad's agent or of its libZydis", keys)
    c.ok(any("libc.so" in k for k in keys), what + ": libc's instructions are counted", keys)
    c.eq(sum(e.get("count", 0) for e in h.get("entries", [])), rep["instructions"],
         what + ": the histogram covers every counted instruction")


# Whole program: both engines, and where they differ.
whole = {}
nat = native([true])
for engine in ENGINES:
    what = "%s /bin/true whole program --by object" % engine
    r = count([true], engine=engine, by="object")
    rep = c.report(r, what, engine, None)
    c.same_as_native(r, nat, what)
    if not rep:
        continue
    whole[engine] = rep
    c.ok(rep["instructions"] > 20000, what + ": the dynamic loader and libc are counted",
         rep["instructions"])
    c.eq(len(rep["threads"]), 1, what + ": one thread")
    no_agent_objects(rep, what)
    c.ok(any("ld-linux" in e.get("key", "") for e in rep["histogram"]["entries"]),
         what + ": the dynamic loader is counted", rep["histogram"]["entries"])
if "ptrace" in whole:
    c.eq(whole["ptrace"]["startup"], None, "ptrace whole program: no startup (it counts from "
         "the first instruction)")
if "trapflag" in whole:
    st = whole["trapflag"]["startup"]
    if c.ok(isinstance(st, dict) and isinstance(st.get("instructions"), int)
            and st["instructions"] > 0 and isinstance(st.get("where"), str) and st["where"],
            "trapflag whole program: startup says how many instructions were stepped by "
            "ptrace before the agent took over, and where", st):
        c.ok(st["instructions"] < whole["trapflag"]["instructions"],
             "trapflag whole program: startup is part of the total", whole["trapflag"])


def agree_but_injection(trap, ptr, what):
    """tracepad runs programs without ASLR: the same program counted from its first
    instruction gives the same counts, object by object, except in the dynamic loader and
    libc, which the trapflag engine's injected dlopen of the agent leaves in another state
    (malloc's heap, _dl_fini's list of objects): a few hundred instructions, INTERNALS.md
    "Counts without tracepad"."""
    h = [{e["key"]: e["count"] for e in r["histogram"]["entries"]} for r in (trap, ptr)]
    for k in sorted(set(h[0]) | set(h[1])):
        if "ld-linux" in k or "libc.so" in k:
            d = h[0].get(k, 0) - h[1].get(k, 0)
            c.ok(abs(d) < 1000, "%s: %s differs only by the agent's injection" % (what, k), d)
        else:
            c.eq(h[0].get(k), h[1].get(k), "%s: engines agree exactly on %s" % (what, k))


if len(whole) == 2:
    agree_but_injection(whole["trapflag"], whole["ptrace"], "/bin/true whole program")



def lackey_count(env):
    """valgrind lackey's guest instructions of /bin/true under env (None: valgrind missing).
    Under load lackey sometimes counts a few more: the least of three runs."""
    vg = shutil.which("valgrind")
    if not vg:
        return None
    got = []
    for _ in range(3):
        p = subprocess.run([vg, "--tool=lackey", "--vex-guest-chase=no", true],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, **env))
        m = re.search(r"guest instrs:\s+([\d,]+)", p.stderr)
        if m:
            got.append(int(m.group(1).replace(",", "")))
    return min(got) if got else None


# The default engine when launching is dbt: nothing of tracepad is counted, the total is the
# ptrace engine's exactly.
what = "default engine /bin/true whole program --by object"
r = count([true], by="object")
rep = c.report(r, what, "dbt", None)
c.same_as_native(r, native([true]), what)
if rep:
    no_agent_objects(rep, what)
    if "ptrace" in whole:
        c.eq(rep["instructions"], whole["ptrace"]["instructions"],
             what + ": total equals the ptrace engine's (no footprint)")
# What an empty preload costs, as lackey sees it, bounds the trapflag engine's footprint.
empty = os.path.join(TARGETS, "libemptypreload.so")
plain, preloaded = lackey_count({}), lackey_count({"LD_PRELOAD": empty})
if plain is None or preloaded is None:
    c.ok(False, "valgrind lackey counts /bin/true with and without an empty preload",
         (plain, preloaded))
elif len(whole) == 2:
    cost = preloaded - plain
    c.ok(cost > 0, "an empty LD_PRELOAD costs /bin/true instructions under lackey", cost)
    foot = whole["trapflag"]["instructions"] - whole["ptrace"]["instructions"]
    c.ok(0 <= foot < cost, "trapflag's footprint on /bin/true (%d) is less than an empty "
         "preload's (%d)" % (foot, cost))

# /bin/ls / under trapflag: the output is unchanged.
argv = [ls, "/"]
nat = native(argv)
what = "trapflag /bin/ls / whole program"
r = count(argv, engine="trapflag", by="object")
rep = c.report(r, what, "trapflag", None)
c.same_as_native(r, nat, what)
if rep:
    c.ok(rep["instructions"] > 100000, what + ": counted", rep["instructions"])
    c.ok(isinstance(rep["startup"], dict), what + ": startup reported", rep["startup"])
    no_agent_objects(rep, what)
    what = "ptrace /bin/ls / whole program"
    r = count(argv, engine="ptrace", by="object")
    rep2 = c.report(r, what, "ptrace", None)
    c.same_as_native(r, nat, what)
    if rep2:
        no_agent_objects(rep2, what)
        agree_but_injection(rep, rep2, "/bin/ls / whole program")

# --start main on stripped programs: main found without .symtab, and the engines agree.
# true's main is 4 instructions when argc != 2 (cmp, je, xor, ret); the others set the locale
# and write their output.
for argv, least in (([true], 3), ([echo, "hello"], 100), ([basename, "/usr/share/doc"], 100)):
    nat = native(argv)
    counts = {}
    for engine in ENGINES:
        what = "%s %s --start main" % (engine, " ".join(argv))
        r = count(argv, engine=engine, start="main")
        rep = c.report(r, what, engine, {"start": "main", "stop": None})
        c.same_as_native(r, nat, what)
        if rep:
            counts[engine] = rep["instructions"]
            c.ok(rep["instructions"] >= least, what + ": main is counted", rep["instructions"])
            c.eq(rep["startup"], None, what + ": a region has no startup")
    c.eq(counts.get("trapflag"), counts.get("ptrace"), "%s --start main: engines agree"
         % " ".join(argv))

c.done()
