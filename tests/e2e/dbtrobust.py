#!/usr/bin/env python3
"""e2e: the dbt engine where programs make a code cache's life hard: code written at run
time without mprotect, a code cache too small for the program (flushed under load, with
threads running in it), bytes the decoder does not know, a program that sets %gs, and
signals that arrive while the runtime's own code runs.  Counts stay exact (the ptrace
engine's) and outputs native."""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import Checks, count, native, target  # noqa: E402

c = Checks("dbt-robust")


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
        want = c.ptrace_count(argv, what)
        if want is not None:
            c.eq(rep["instructions"], want, what + ": the ptrace engine's count")
    return r, rep


# 1. Code written at run time on RWX pages, without mprotect: f is rewritten in place 300
# times and called directly and from g on another page (a direct call: its link must be
# undone), then its code comes in through read(2).
r, _ = check([target("jit")], "jit: code rewritten in place")
c.eq(r.out, "jit 300 rounds, sum 1139779, wrong 0\n", "jit: every result right")

# 2. A full code cache: TRACEPAD_DBT_CACHE_SIZE makes it tiny, so that it is flushed again
# and again under load (old chunks reused once no thread can run there).  Single-threaded
# programs count exactly as the ptrace engine does (both runs with the same environment);
# threads-O2's 4 workers, running in the cache at the flushes, keep their exact counts.
os.environ["TRACEPAD_DBT_CACHE_SIZE"] = "64K"
r, _ = check([target("compute-O2")], "compute-O2, 64 KiB cache")
r, _ = check([target("jit")], "jit, 64 KiB cache")
c.eq(r.out, "jit 300 rounds, sum 1139779, wrong 0\n", "jit, 64 KiB cache: every result right")


def worker_counts(argv, what):
    r, rep = check(argv, what, exact=False)
    if not rep:
        return None
    c.eq(len(rep["threads"]), 5, what + ": 5 threads", rep["threads"])
    return sorted(t["instructions"] for t in rep["threads"])[:4]


small = worker_counts([target("threads-O2"), "20"], "threads-O2, 64 KiB cache")
del os.environ["TRACEPAD_DBT_CACHE_SIZE"]
big = worker_counts([target("threads-O2"), "20"], "threads-O2")
c.eq(small, big, "threads-O2: the workers' counts with a 64 KiB cache as with the default")

# python3 with a thread: its output, under a 1 MiB cache that holds a fraction of its code
# (the chunks it maps, seen in /proc/self/maps, outnumber those of the default cache).
PY = ("import threading, json; t = threading.Thread(target=print, "
      "args=(json.dumps({'a': [1, 2]}),)); t.start(); t.join(); "
      "n = sum('tracepad-dbt-cache' in l for l in open('/proc/self/maps')); ")
if os.access("/usr/bin/python3", os.X_OK):
    r = count(["/usr/bin/python3", "-c", PY + "print(n)"], engine="dbt")
    lines = r.out.split("\n")
    if c.ok(r.rc == 0 and len(lines) == 3 and lines[1].isdigit(), "python3: runs", r):
        chunks = int(lines[1])
        os.environ["TRACEPAD_DBT_CACHE_SIZE"] = "1M"
        argv = ["/usr/bin/python3", "-c", PY + "print(n > %d)" % chunks]
        nat = native(argv)
        r = count(argv, engine="dbt")
        rep = c.report(r, "python3 with a thread, 1 MiB cache", "dbt")
        c.eq((r.rc, r.out), (0, '{"a": [1, 2]}\nTrue\n'),
             "python3 with a thread, 1 MiB cache: its output, more chunks than %d" % chunks, r)
        c.eq(nat.out, '{"a": [1, 2]}\nFalse\n', "python3 natively: no cache")
        if rep:
            c.eq(len(rep["threads"]), 2, "python3, 1 MiB cache: 2 threads", rep["threads"])
            c.ok("warning" not in rep, "python3, 1 MiB cache: no warning", rep.get("warning"))
        del os.environ["TRACEPAD_DBT_CACHE_SIZE"]

# 3. Bad cases.  Bytes the decoder does not know: the program gets SIGILL at their address,
# as natively; when that kills it, the report says why and the counts so far are in.  A
# program that sets %gs (the runtime's) leaves the cache and runs natively, reported.
BAD_S = {
    "undecodable": ".globl _start\n_start:\n mov $60, %eax\n .byte 0x0f, 0x04\n",
    "setgs": (".globl _start\n_start:\n mov $158, %eax\n mov $0x1001, %edi\n"
              " xor %esi, %esi\n syscall\n mov %eax, %edi\n neg %edi\n mov $60, %eax\n"
              " syscall\n"),
}
BAD_C = {
    # a SIGILL handler reads the pc and si_addr, and steps over the bytes
    "ill": r"""
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
extern char bad_at[];
static volatile long seen_pc, seen_addr, n;
static void on_ill(int sig, siginfo_t *si, void *p)
{
	ucontext_t *uc = p;

	seen_pc = (long)uc->uc_mcontext.gregs[REG_RIP] - (long)bad_at;
	seen_addr = (long)si->si_addr - (long)bad_at;
	n++;
	uc->uc_mcontext.gregs[REG_RIP] += 2;
}
int main(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_ill;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGILL, &sa, NULL);
	for (int i = 0; i < 3; i++)
		__asm__ volatile(".globl bad_at\nbad_at: .byte 0x0f, 0x04\n nop\n");
	printf("SIGILL %ld times, at +%ld, si_addr +%ld\n", n, seen_pc, seen_addr);
	return 0;
}
""",
    # %gs set to the program's own data, read back, then more work and a signal
    "gs": r"""
#include <asm/prctl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
static unsigned long area[2] = {0x1234, 0x5678};
static volatile int usr1;
static void on_usr1(int sig)
{
	usr1++;
}
int main(void)
{
	unsigned long v = 0, got = 1, sum = 0;
	long r;

	signal(SIGUSR1, on_usr1);
	r = syscall(SYS_arch_prctl, ARCH_GET_GS, &got);
	printf("get gs: %ld %lu\n", r, got);
	r = syscall(SYS_arch_prctl, ARCH_SET_GS, area);
	__asm__ volatile("mov %%gs:8, %0" : "=r"(v));
	printf("set gs: %ld, %%gs:8 = %lx\n", r, v);
	for (int i = 0; i < 1000; i++)
		sum += (unsigned long)i * v;
	raise(SIGUSR1);
	printf("sum %lu, usr1 %d\n", sum, usr1);
	return 0;
}
""",
}
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    exes = {}
    for name, text in list(BAD_S.items()) + list(BAD_C.items()):
        src, exe = os.path.join(tmp, name + (".S" if name in BAD_S else ".c")), os.path.join(
            tmp, name)
        with open(src, "w") as f:
            f.write(text)
        flags = ["-nostdlib", "-static"] if name in BAD_S else ["-O2"]
        if c.ok(subprocess.run(["cc"] + flags + ["-o", exe, src]).returncode == 0,
                "cc builds " + name):
            exes[name] = exe
    for name, says, ex in (("undecodable", "does not know an instruction: the program got "
                            "SIGILL", {"signal": 4}),
                           ("setgs", "sets %gs (which the dbt engine owns) and runs natively",
                            {"status": 0})):
        if name not in exes:
            continue
        nat = native([exes[name]])
        r = count([exes[name]], engine="dbt")
        rep = c.report(r, name, "dbt")
        c.same_as_native(r, nat, name)
        if rep:
            c.ok(says in rep.get("warning", ""), name + ": the report says why",
                 rep.get("warning"))
            c.eq(rep["exit"], ex, name + ": exit")
            # mov (a fault is not counted: the ptrace engine counts its last stop as one
            # more when the program dies of it, not when a handler runs); mov, mov, xor,
            # syscall
            c.eq(rep["instructions"], {"undecodable": 1, "setgs": 4}[name],
                 name + ": the counts up to there")
    if "ill" in exes:
        r, _ = check([exes["ill"]], "a SIGILL handler")
        c.eq(r.out, "SIGILL 3 times, at +0, si_addr +0\n",
             "a SIGILL handler: the bytes' own address, in rip and si_addr")
    if "gs" in exes:
        nat = native([exes["gs"]])
        r = count([exes["gs"]], engine="dbt")
        rep = c.report(r, "%gs set to program data", "dbt")
        c.same_as_native(r, nat, "%gs set to program data")
        c.eq(r.out.split("\n")[:2], ["get gs: 0 0", "set gs: 0, %gs:8 = 5678"],
             "%gs set to program data: read back")
        if rep:
            c.ok("runs natively" in rep.get("warning", ""), "%gs: the report says why",
                 rep.get("warning"))

# 4. Signals that arrive while the runtime's own code runs (dispatch, the gate, the lookup
# shared by handlers' entries): the handler's ucontext shows a pc of the program's text or
# libc's, never the runtime's; with a small cache too (more of the runtime's own code runs).
for size in (None, "64K"):
    what = "proftick" + (", %s cache" % size if size else "")
    if size:
        os.environ["TRACEPAD_DBT_CACHE_SIZE"] = size
    for i in range(2):
        r, _ = check([target("proftick")], "%s, run %d" % (what, i), exact=False)
        c.eq(r.out, "acc 721535, ticks came: yes, pc outside: 0\n",
             "%s, run %d: every interrupted pc in the program's text" % (what, i))
    os.environ.pop("TRACEPAD_DBT_CACHE_SIZE", None)

c.done()
