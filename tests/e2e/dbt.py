#!/usr/bin/env python3
"""e2e: the dbt engine (the program runs in src/dbt's code cache) counts whole programs as
the ptrace engine does, and leaves their output and exit status unchanged.

Two artefacts of single-stepping on this machine are taken out of the ptrace count before
comparing (docs/INTERNALS.md, "The code cache"): the step over `cpuid` (a VM exit here)
reports its trap one instruction late, so each executed cpuid hides the instruction after
it; the exit syscall is counted twice; and the step over a fork loses one.  Hand-written
programs whose counts are known (exit: 3 instructions; fork and exit: 7) check the dbt
engine against the truth rather than against another engine."""
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import Checks, count, native, target  # noqa: E402

c = Checks("dbt")


def ptrace_truth(argv, what, forks=0):
    """The ptrace engine's count with the stepping artefacts taken out."""
    r = count(argv, engine="ptrace", by="mnemonic", top=0)
    rep = c.report(r, what + " (ptrace)", "ptrace")
    if not rep:
        return None
    cpuid = sum(e["count"] for e in rep["histogram"]["entries"] if e["key"] == "cpuid")
    return rep["instructions"] + cpuid - 1 + forks


def check(argv, what, forks=0):
    nat = native(argv)
    r = count(argv, engine="dbt")
    rep = c.report(r, what, "dbt")
    c.same_as_native(r, nat, what)
    if not rep:
        return
    c.ok("warning" not in rep, what + ": no warning", rep.get("warning"))
    c.ok(len(rep["threads"]) == 1, what + ": one thread", rep["threads"])
    want = ptrace_truth(argv, what, forks)
    if want is not None:
        c.eq(rep["instructions"], want, what + ": the ptrace engine's count")


# Programs whose counts are known: exit (mov, mov, syscall), and fork then exit in both
# processes (the parent runs mov, syscall, test, jz, mov, mov, syscall; the child is not
# counted, as under the other engines).
KNOWN = {
    "exit3": (".globl _start\n_start:\n mov $60, %eax\n mov $7, %edi\n syscall\n", 3, 7),
    "fork7": (".globl _start\n_start:\n mov $57, %eax\n syscall\n test %eax, %eax\n"
              " jz 1f\n mov $60, %eax\n mov $5, %edi\n syscall\n"
              "1: mov $60, %eax\n mov $0, %edi\n syscall\n", 7, 5),
}
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    for name, (asm, want, status) in KNOWN.items():
        src, exe = os.path.join(tmp, name + ".S"), os.path.join(tmp, name)
        with open(src, "w") as f:
            f.write(asm)
        built = subprocess.run(["cc", "-nostdlib", "-static", "-o", exe, src]).returncode == 0
        if c.ok(built, "cc builds " + name):
            r = count([exe], engine="dbt")
            rep = c.report(r, name, "dbt")
            if rep:
                c.eq(rep["instructions"], want, "%s: %d instructions" % (name, want))
                c.eq(rep["exit"], {"status": status}, "%s: exit status %d" % (name, status))

# Signals: handlers run in the cache (counted, also on a sigaltstack and with SA_SIGINFO),
# and a 100 us profiling timer interrupts the program anywhere, the runtime included.
SIGNALS_C = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
static volatile unsigned long work_sum, ticks;
static void on_usr1(int sig, siginfo_t *si, void *uc)
{
	for (int i = 0; i < 100; i++)
		work_sum += (unsigned long)i * (unsigned long)si->si_signo;
}
static void on_prof(int sig)
{
	ticks++;
}
int main(int argc, char **argv)
{
	struct sigaction sa;
	static char alt[1 << 16];
	stack_t ss = {.ss_sp = alt, .ss_size = sizeof(alt)};
	unsigned long h = 1469598103934665603ul;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_usr1;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	sigaltstack(&ss, NULL);
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	if (argc > 1) {
		struct itimerval it = {{0, 100}, {0, 100}};

		sa.sa_handler = on_prof;
		sa.sa_flags = SA_RESTART;
		sigaction(SIGPROF, &sa, NULL);
		setitimer(ITIMER_PROF, &it, NULL);
		for (unsigned long i = 0; i < 20000000; i++)
			h = (h ^ (i & 255)) * 1099511628211ul;
		memset(&it, 0, sizeof(it));
		setitimer(ITIMER_PROF, &it, NULL);
	}
	printf("signals %lu %lx\n", work_sum, h);
	return 0;
}
"""

with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    src, exe = os.path.join(tmp, "signals.c"), os.path.join(tmp, "signals")
    with open(src, "w") as f:
        f.write(SIGNALS_C)
    built = subprocess.run(["cc", "-O2", "-o", exe, src]).returncode == 0
    if c.ok(built, "cc builds the signals program"):
        check([exe], "signals: synchronous handlers")
        nat = native([exe, "timer"])
        r = count([exe, "timer"], engine="dbt")
        rep = c.report(r, "signals: every 100 us", "dbt")
        c.same_as_native(r, nat, "signals: every 100 us")
        if rep:
            c.ok("warning" not in rep, "signals: every 100 us: no warning", rep.get("warning"))

# Bad cases: a program that sets %gs (which the runtime owns) has the call refused and is
# told so; bytes the decoder does not know stop the run cleanly.  Both are reported.
BAD = {
    "setgs": (".globl _start\n_start:\n mov $158, %eax\n mov $0x1001, %edi\n"
              " xor %esi, %esi\n syscall\n mov %eax, %edi\n neg %edi\n mov $60, %eax\n"
              " syscall\n", "uses %gs", {"status": 1}),
    "undecodable": (".globl _start\n_start:\n mov $60, %eax\n .byte 0x0f, 0x04\n",
                    "decoder does not know", {"status": 127}),
}
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    for name, (asm, says, ex) in BAD.items():
        src, exe = os.path.join(tmp, name + ".S"), os.path.join(tmp, name)
        with open(src, "w") as f:
            f.write(asm)
        built = subprocess.run(["cc", "-nostdlib", "-static", "-o", exe, src]).returncode == 0
        if c.ok(built, "cc builds " + name):
            r = count([exe], engine="dbt")
            rep = c.report(r, name, "dbt")
            if rep:
                c.ok(says in rep.get("warning", ""), name + ": the report says why",
                     rep.get("warning"))
                c.eq(rep["exit"], ex, name + ": exit")

# Exact under asynchronous signals: the handler (2 instructions, then glibc's 2-instruction
# restorer) interrupts a loop wherever the timer fires, the count's own sequence included;
# count - 4 * ticks must not depend on where or how often it did.
TICKS_C = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
volatile unsigned long ticks;
void on_prof(int sig);
__asm__(".globl on_prof\n on_prof: incq ticks(%rip)\n ret\n");
int main(void)
{
	struct sigaction sa;
	struct itimerval it = {{0, 100}, {0, 100}};
	unsigned long h = 1;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_prof;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);
	setitimer(ITIMER_PROF, &it, NULL);
	for (unsigned long i = 0; i < 40000000; i++)
		h = (h ^ (i & 255)) * 1099511628211ul;
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_PROF, &it, NULL);
	printf("%lu %lx\n", ticks, h);
	return 0;
}
"""
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    src, exe = os.path.join(tmp, "ticks.c"), os.path.join(tmp, "ticks")
    with open(src, "w") as f:
        f.write(TICKS_C)
    built = subprocess.run(["cc", "-O2", "-no-pie", "-o", exe, src]).returncode == 0
    if c.ok(built, "cc builds the ticks program"):
        base = set()
        for i in range(3):
            r = count([exe], engine="dbt")
            rep = c.report(r, "ticks run %d" % i, "dbt")
            if rep and r.rc == 0:
                base.add(rep["instructions"] - 4 * int(r.out.split()[0]))
        c.eq(len(base), 1, "ticks: count - 4 * ticks is the same in every run (%s)" % base)

# dlclose then dlopen of another library at the same address: the first one's
# translations must not run for the second (munmap drops them).
DL_MAIN = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	void *at[3] = {0};

	for (int i = 1; i <= 2; i++) {
		void *h = dlopen(argv[i], RTLD_NOW);
		int (*f)(void) = h ? (int (*)(void))dlsym(h, "f") : NULL;

		if (!f)
			return 2;
		at[i] = (void *)f;
		printf("%d\n", f());
		dlclose(h);
	}
	printf("same address: %d\n", at[1] == at[2]);
	return 0;
}
"""
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    libs = []
    for name, body in (("a", "int f(void) { return 11; }\n"),
                       ("b", "int f(void) { return 22 * 2 - 1; }\nint g(int x) { return x; }\n")):
        src, lib = os.path.join(tmp, name + ".c"), os.path.join(tmp, "lib%s.so" % name)
        with open(src, "w") as f:
            f.write(body)
        libs.append(subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src]).returncode
                    == 0 and lib)
    src, exe = os.path.join(tmp, "dl.c"), os.path.join(tmp, "dl")
    with open(src, "w") as f:
        f.write(DL_MAIN)
    built = all(libs) and subprocess.run(["cc", "-O2", "-o", exe, src]).returncode == 0
    if c.ok(built, "cc builds the dlopen program and its two libraries"):
        argv = [exe] + libs
        check(argv, "dlopen, dlclose, dlopen")
        r = count(argv, engine="dbt")
        c.eq(r.out, "11\n43\nsame address: 1\n", "dlopen: each library's f ran, at one address")

check(["/bin/true"], "/bin/true")
check([target("compute-O2")], "compute-O2")
check([target("sigmask")], "sigmask")
check([target("forkexec"), "fork"], "forkexec fork", forks=1)
check([target("forkexec"), "vfork"], "forkexec vfork", forks=1)

# What the engine cannot run yet is refused before the program starts.
r = count([target("threads-O2"), "2"], engine="dbt")
c.eq(r.rc, 2, "threads: refused with status 2")
c.ok("does not run threads yet" in r.err and "threads" not in r.out, "threads: says why, "
     "and the program did not run", r)

c.done()
