#!/usr/bin/env python3
"""e2e: the dbt engine's whole-program counts of real programs equal the ptrace engine's,
from the first instruction after execve (issue 10, "Exact"): ls / (function by function),
sha256sum of 8 KiB and of 16 KiB, with TP_E2E_SLOW=1 python3 -c pass too (about 34 M
instructions: 9 to 27 minutes of single-stepping on these machines, too long for CI;
compared function by function), and a program that uses the rseq
area glibc 2.36 registers for every thread (the kernel keeps its cpu_id up to date; the
cache must leave it working).  Outputs and exit statuses are those of native runs."""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import Checks, cc, count, native  # noqa: E402

c = Checks("dbt-exact")


def exact(argv, what, timeout=None):
    nat = native(argv, timeout=timeout or 60)
    got = {}
    for engine in ("dbt", "ptrace"):
        r = count(argv, engine=engine, **({"timeout": timeout} if timeout else {}))
        rep = c.report(r, "%s (%s)" % (what, engine), engine)
        c.same_as_native(r, nat, "%s (%s)" % (what, engine))
        if rep:
            c.ok("warning" not in rep, "%s (%s): no warning" % (what, engine),
                 rep.get("warning"))
            got[engine] = rep["instructions"]
    if len(got) == 2:
        c.eq(got["dbt"], got["ptrace"], what + ": the dbt engine's count is the ptrace engine's")


def by_function(argv, what, timeout):
    """The engines' instructions by function, equal but in the vDSO: its clock_gettime
    retries a read that a clock update overlapped, which depends on time (a run stepped
    by ptrace takes minutes), natively as under either engine."""
    nat = native(argv, timeout=timeout)
    hist = {}
    for engine in ("dbt", "ptrace"):
        r = count(argv, engine=engine, by="function", top=100000, timeout=timeout)
        rep = c.report(r, "%s (%s)" % (what, engine), engine)
        c.same_as_native(r, nat, "%s (%s)" % (what, engine))
        if rep:
            entries = (rep.get("histogram") or {}).get("entries", [])
            hist[engine] = {e["key"]: e["count"] for e in entries
                            if not e["key"].startswith("[vdso]")}
            c.eq(sum(e["count"] for e in entries), rep["instructions"],
                 "%s (%s): the histogram has every instruction" % (what, engine))
            print("# %s (%s): %d instructions, %d in the vDSO" % (
                what, engine, rep["instructions"],
                rep["instructions"] - sum(hist[engine].values())), flush=True)
    if len(hist) == 2:
        d, p = hist["dbt"], hist["ptrace"]
        diff = {k: (d.get(k, 0), p.get(k, 0)) for k in set(d) | set(p) if d.get(k) != p.get(k)}
        c.eq(sum(d.values()), sum(p.values()), what + ": the engines' counts outside the vDSO")
        c.eq(diff, {}, what + ": every function's count the same under both engines")


# python3 (TP_E2E_SLOW=1) first: it is the longest by far.  Its string hashes are seeded at random and it tries to write bytecode caches, natively
# too: both are fixed for the run (PYTHONHASHSEED=0, PYTHONDONTWRITEBYTECODE=1), with which
# its runs repeat to the instruction.
python = "/usr/bin/python3"
if os.environ.get("TP_E2E_SLOW") != "1":
    print("# python3 -c pass: run with TP_E2E_SLOW=1 (docs/INTERNALS.md)", flush=True)
elif c.ok(os.access(python, os.X_OK), "Debian's python3 is installed", python):
    os.environ.update(PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    by_function([python, "-c", "pass"], "python3 -c pass", 3600)
    del os.environ["PYTHONHASHSEED"], os.environ["PYTHONDONTWRITEBYTECODE"]

by_function(["/usr/bin/ls", "/"], "ls /", 300)
exact(["/usr/bin/ls", "/"], "ls /")
with tempfile.TemporaryDirectory(prefix="tp-exact-") as tmp:
    for size in (8192, 16384):
        path = os.path.join(tmp, "data%d" % size)
        with open(path, "wb") as f:
            f.write(bytes((i * 7 + i // 251) & 255 for i in range(size)))
        exact(["/usr/bin/sha256sum", path], "sha256sum of %d KiB" % (size // 1024))

    # rseq: glibc registered the area (its size and offset from the thread pointer are
    # exported); its cpu_id is the kernel's, the same as getcpu's, in every thread.
    RSEQ_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/rseq.h>
static int check(void)
{
	struct rseq *rs = (struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
	int bad = 0;
	for (int i = 0; i < 1000; i++) {
		unsigned cpu;
		unsigned a = __atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED);
		getcpu(&cpu, NULL);
		unsigned b = __atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED);
		bad += a != cpu && b != cpu; /* a migration may come between two reads */
	}
	return bad;
}
static void *run(void *p)
{
	*(int *)p = check();
	return NULL;
}
int main(void)
{
	pthread_t t;
	int in_thread = -1;
	printf("rseq size %u\n", __rseq_size);
	if (!__rseq_size)
		return 1;
	pthread_create(&t, NULL, run, &in_thread);
	pthread_join(t, NULL);
	printf("cpu_id wrong: main %d thread %d\n", check(), in_thread);
	return 0;
}
"""
    exe = cc(tmp, "rseq.c", RSEQ_C, "-O2", "-pthread")
    if c.ok(exe is not None, "cc builds the rseq program"):
        nat = native([exe])
        c.ok(nat.rc == 0 and "cpu_id wrong: main 0 thread 0" in nat.out,
             "rseq: registered natively, cpu_id right", nat)
        r = count([exe], engine="dbt")
        rep = c.report(r, "rseq (dbt)", "dbt")
        c.same_as_native(r, nat, "rseq (dbt)")
c.done()
