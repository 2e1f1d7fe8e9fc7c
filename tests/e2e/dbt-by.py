#!/usr/bin/env python3
"""e2e: the dbt engine offers what the other engines do, and agrees with the ptrace engine:
--by mnemonic, function, object and address, --start/--stop regions, the program's own
tp_step_begin()/tp_step_end() regions, per-thread counts of the 4-thread target, --json
with the same keys, --trace DIR read by babeltrace2.  Its histograms come from per-block
counters (src/dbt/rt-count.c), so they must sum to the total exactly, stay exact under a
100 us profiling timer, and leave a vfork child's instructions out as the total does."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import TICKS_C, Checks, cc, count, count_argv, native, target  # noqa: E402

c = Checks("dbt-by")


def histogram(rep, by, what):
    """{key: count} of the report, checked well-formed and summing to the total."""
    h = rep.get("histogram")
    if not c.ok(isinstance(h, dict) and h.get("by") == by and isinstance(h.get("entries"), list),
                what + ": histogram by " + by, h):
        return None
    entries = {e["key"]: e["count"] for e in h["entries"]}
    c.eq(len(entries), len(h["entries"]), what + ": distinct keys")
    c.eq(sum(entries.values()), rep["instructions"], what + ": the histogram sums to the total")
    return entries


def by_place(h):
    """An address histogram keyed by object:function+offset: the runtime's own mappings
    move the program's libraries (not its executable) under the dbt engine."""
    return h and {k.split(" ", 1)[-1]: v for k, v in h.items()}


def both(argv, what, start=None, stop=None, by=None):
    """The dbt and ptrace reports of one run each: (dbt, ptrace), None where one failed."""
    reps = []
    region = {"start": start, "stop": stop} if start else None
    for engine in ("dbt", "ptrace"):
        r = count(argv, engine=engine, start=start, stop=stop, by=by, top=0)
        rep = c.report(r, "%s %s" % (engine, what), engine, region)
        if engine == "dbt":
            c.same_as_native(r, native(argv), "dbt " + what)
        reps.append(rep)
    return reps


# Regions: the engines agree to the instruction, histograms included.
for opt in ("O0", "O2"):
    argv = [target("compute-" + opt), "7"]
    for by in ("mnemonic", "function", "address", "object"):
        what = "compute-%s --start work --by %s" % (opt, by)
        d, p = both(argv, what, start="work", by=by)
        if d and p:
            c.ok(d["instructions"] > 10000, what + ": the region's work is counted",
                 d["instructions"])
            c.eq(d["instructions"], p["instructions"], what + ": the ptrace engine's count")
            hd, hp = histogram(d, by, "dbt " + what), histogram(p, by, "ptrace " + what)
            if by == "address":
                hd, hp = by_place(hd), by_place(hp)
            c.eq(hd, hp, what + ": the ptrace engine's histogram")
    what = "compute-%s --start main --stop work" % opt
    d, p = both(argv, what, start="main", stop="work", by="mnemonic")
    if d and p:
        c.eq(d["instructions"], p["instructions"], what + ": the ptrace engine's count")
        c.eq(histogram(d, "mnemonic", "dbt " + what), histogram(p, "mnemonic", "ptrace " + what),
             what + ": the ptrace engine's histogram")

# The program's own tp_step_begin()/tp_step_end() regions (the agent preloaded, its code
# never counted): 2n + 10 for asm.S's tp_step_loop, and the compiler-made one as ptrace.
for n in (0, 20):
    argv = [target("asmloop"), str(n), "step"]
    r = count(argv, engine="dbt", by="function")
    rep = c.report(r, "asmloop %d step" % n, "dbt",
                   {"start": "tp_step_begin", "stop": "tp_step_end"})
    c.same_as_native(r, native(argv), "asmloop %d step" % n)
    if rep:
        c.eq(rep["instructions"], 2 * n + 10, "asmloop %d step: 2n + 10 instructions" % n)
        histogram(rep, "function", "asmloop %d step" % n)
d, p = both([target("asmloop"), "50", "step-c"], "asmloop step-c", by="mnemonic")
if d and p:
    c.eq(d["instructions"], p["instructions"], "asmloop step-c: the ptrace engine's count")
    c.eq(histogram(d, "mnemonic", "dbt step-c"), histogram(p, "mnemonic", "ptrace step-c"),
         "asmloop step-c: the ptrace engine's histogram")
r = count([target("asmloop"), "20", "twice"], engine="dbt", start="tp_loop")
rep = c.report(r, "asmloop twice --start tp_loop", "dbt")
if rep:
    c.eq(rep["instructions"], 44, "asmloop twice --start tp_loop: the first call only (44)")

# A region left by longjmp ends there (the stack rose above its frame: work is called from
# a deeper frame than setjmp's), as under ptrace; later calls are not counted (each
# thread's first entry only).
JMP_C = r"""
#include <setjmp.h>
#include <stdio.h>
static jmp_buf jb;
__attribute__((noinline)) void deep(int n)
{
	if (n == 0)
		longjmp(jb, 1);
	deep(n - 1);
}
__attribute__((noinline)) int work(int n)
{
	volatile int s = 0;

	for (int i = 0; i < n; i++)
		s += i;
	deep(5);
	return s;
}
__attribute__((noinline)) int run(int n)
{
	volatile char pad[64];

	pad[0] = 0;
	return work(n) + pad[0];
}
int main(void)
{
	volatile int r = 0;

	if (!setjmp(jb))
		r = run(1000);
	for (int i = 0; i < 3; i++)
		if (!setjmp(jb))
			r += work(10);
	printf("%d\n", r);
	return 0;
}
"""
with tempfile.TemporaryDirectory(prefix="tp-dbt-by-") as tmp:
    exe = cc(tmp, "jmp.c", JMP_C, "-O1")
    if c.ok(exe, "cc builds jmp"):
        d, p = both([exe], "longjmp out of --start work", start="work", by="function")
        if d and p:
            c.ok(d["instructions"] > 4000, "longjmp: the region is counted", d["instructions"])
            c.eq(d["instructions"], p["instructions"], "longjmp: the ptrace engine's count")
            hd = histogram(d, "function", "dbt longjmp")
            c.eq(hd, histogram(p, "function", "ptrace longjmp"),
                 "longjmp: the ptrace engine's histogram")
            c.ok(hd and not any("printf" in k for k in hd), "longjmp: main's printf is not in",
                 hd)

# ... and so does one left by a C++ exception caught two frames up, through libgcc's unwinder.
EXC_CC = r"""
#include <cstdio>
#include <stdexcept>
__attribute__((noinline)) void deep(int n)
{
	if (n == 0)
		throw std::runtime_error("out");
	deep(n - 1);
}
extern "C" __attribute__((noinline)) int work(int n)
{
	volatile int s = 0;

	for (int i = 0; i < n; i++)
		s += i;
	deep(4);
	return s;
}
__attribute__((noinline)) int run(int n)
{
	try {
		return work(n);
	} catch (const std::exception &e) {
		return 7;
	}
}
int main()
{
	int r = run(1000);
	r += run(10);
	std::printf("%d\n", r);
	return 0;
}
"""
with tempfile.TemporaryDirectory(prefix="tp-dbt-by-") as tmp:
    exe = cc(tmp, "exc.cc", EXC_CC, "-O1", compiler="c++")
    if c.ok(exe, "c++ builds exc"):
        d, p = both([exe], "an exception out of --start work", start="work", by="function")
        if d and p:
            c.eq(d["instructions"], p["instructions"], "exception: the ptrace engine's count")
            hd = histogram(d, "function", "dbt exception")
            c.eq(hd, histogram(p, "function", "ptrace exception"),
                 "exception: the ptrace engine's histogram")
            c.ok(hd and any("_Unwind_RaiseException" in k for k in hd)
                 and not any("printf" in k for k in hd),
                 "exception: the unwinder is in, main's printf is not", hd and list(hd)[:30])

# Per-thread counts: the 4 workers of threads-O2 in --start worker regions, and whole.
argv = [target("threads-O2"), "3"]
d, p = both(argv, "threads-O2 --start worker", start="worker", by="mnemonic")
in_worker = d and d["instructions"]
if d and p:
    c.eq(sorted(t["instructions"] for t in d["threads"]),
         sorted(t["instructions"] for t in p["threads"]),
         "threads-O2 --start worker: the ptrace engine's per-thread counts")
    c.eq(len(d["threads"]), 4, "threads-O2 --start worker: 4 threads")
    c.eq(histogram(d, "mnemonic", "dbt threads-O2"), histogram(p, "mnemonic", "ptrace threads-O2"),
         "threads-O2 --start worker: the ptrace engine's histogram")
r = count(argv, engine="dbt", by="function")
rep = c.report(r, "threads-O2 --by function", "dbt")
if rep:
    fn = histogram(rep, "function", "threads-O2 --by function")
    w = sorted(t["instructions"] for t in rep["threads"])
    c.eq(len(w), 5, "threads-O2 --by function: 5 threads", w)
    c.eq([b - a for a, b in zip(w[:3], w[1:4])], [5100] * 3,
         "threads-O2 --by function: 300 rounds more each", w)
    c.eq((fn or {}).get("threads-O2:worker"), in_worker,
         "threads-O2 --by function: worker's instructions as the --start worker regions")

# Whole programs (the loader's cpuids included): every object as ptrace counts it.
for argv in (["/bin/true"], [target("compute-O2"), "3"]):
    name = os.path.basename(argv[0])
    d, p = both(argv, name + " --by object", by="object")
    if d and p:
        c.eq(histogram(d, "object", "dbt " + name), histogram(p, "object", "ptrace " + name),
             name + ": every object as ptrace counts it")
        c.eq(d["instructions"], p["instructions"], name + ": the same total")

# --json: the same keys as the other engines' reports; the whole count unchanged by --by.
d, p = both([target("compute-O2"), "3"], "compute-O2 --by address", by="address")
if d and p:
    c.eq(sorted(d), sorted(p), "--json: the ptrace engine's keys")
    r = count([target("compute-O2"), "3"], engine="dbt")
    rep = c.report(r, "compute-O2 whole", "dbt")
    if rep:
        c.eq(d["instructions"], rep["instructions"], "--by address: the count without --by")
        c.ok(all(k.startswith("0x") for k in histogram(d, "address", "dbt --by address")),
             "--by address: keys are addresses")

# vfork: the child runs on its parent's counters until it execs; what it ran is not the
# parent's, with or without histograms.
for how in ("fork", "vfork"):
    argv = [target("forkexec"), how]
    r0, r1 = count(argv, engine="dbt"), count(argv, engine="dbt", by="object")
    a = c.report(r0, "forkexec " + how, "dbt")
    b = c.report(r1, "forkexec %s --by object" % how, "dbt")
    if a and b:
        c.eq(b["instructions"], a["instructions"], "forkexec %s: the same count with --by" % how)
        histogram(b, "object", "forkexec " + how)

# Asynchronous signals: a handler that interrupts a block's counter update adds to the
# same counters; count - 4 * ticks is the same in every run, as without --by (ticks has
# two digits in every run: printing it costs the same).
with tempfile.TemporaryDirectory(prefix="tp-dbt-by-") as tmp:
    exe = cc(tmp, "ticks.c", TICKS_C, "-O2", "-no-pie")
    if c.ok(exe, "cc builds the ticks program"):
        base = set()
        for by in ("mnemonic", "function", None):
            r = count([exe], engine="dbt", by=by, top=0)
            rep = c.report(r, "ticks --by %s" % by, "dbt")
            if rep and r.rc == 0:
                base.add(rep["instructions"] - 4 * int(r.out.split()[0], 16))
                if by:
                    histogram(rep, by, "ticks --by " + by)
        c.eq(len(base), 1, "ticks: count - 4 * ticks the same with and without --by (%s)" % base)

# --trace DIR: the summary, the threads and the histogram as events babeltrace2 reads.
with tempfile.TemporaryDirectory(prefix="tp-dbt-by-") as tmp:
    d = os.path.join(tmp, "trace")
    r = count([target("compute-O2"), "3"], engine="dbt", by="object", extra=("--trace", d))
    rep = c.report(r, "--trace", "dbt")
    if rep and c.ok(shutil.which("babeltrace2") is not None, "babeltrace2 is installed"):
        b = subprocess.run(["babeltrace2", d], capture_output=True, text=True, timeout=120)
        c.eq(b.returncode, 0, "--trace: babeltrace2 reads the trace", b.stderr[-300:])
        c.ok("instructions = %d" % rep["instructions"] in b.stdout,
             "--trace: the summary event has the count", b.stdout[:300])
        c.eq(b.stdout.count("count_histogram:"), len(rep["histogram"]["entries"]),
             "--trace: one histogram event an entry")

# --start main on a stripped program (Debian's ls): main's address decoded from its entry
# code; the region is the ptrace engine's (which finds main from __libc_start_main).
argv = ["/usr/bin/ls", "/"]
nat = native(argv)
got = {}
for engine in ("dbt", "ptrace"):
    r = count(argv, engine=engine, start="main")
    rep = c.report(r, "stripped ls --start main (%s)" % engine, engine,
                   region={"start": "main", "stop": None})
    c.same_as_native(r, nat, "stripped ls --start main (%s)" % engine)
    if rep:
        got[engine] = rep["instructions"]
if len(got) == 2:
    c.eq(got["dbt"], got["ptrace"], "stripped ls --start main: the ptrace engine's count")

c.done()
