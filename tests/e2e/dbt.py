#!/usr/bin/env python3
"""e2e: the dbt engine (the program runs in src/dbt's code cache) counts whole programs as
the ptrace engine does, and leaves their output and exit status unchanged.

Hand-written programs whose counts are known (exit: 3 instructions; fork and exit: 7; two
cpuids, whose single-step trap comes one instruction late in this VM: 10) check both
engines against the truth rather than against each other."""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import TICKS_C, Checks, cc, count, native, target  # noqa: E402

c = Checks("dbt")


def check(argv, what):
    nat = native(argv)
    r = count(argv, engine="dbt")
    rep = c.report(r, what, "dbt")
    c.same_as_native(r, nat, what)
    if not rep:
        return
    c.ok("warning" not in rep, what + ": no warning", rep.get("warning"))
    c.ok(len(rep["threads"]) == 1, what + ": one thread", rep["threads"])
    want = c.ptrace_count(argv, what)
    if want is not None:
        c.eq(rep["instructions"], want, what + ": the ptrace engine's count")


# Programs whose counts are known: exit (mov, mov, syscall), fork then exit in both
# processes (the parent runs mov, syscall, test, jz, mov, mov, syscall; the child is not
# counted, as under the other engines; its SIGCHLD may reach the stepped parent), and two
# cpuids each followed by an instruction that a late step trap would hide.  urg22 makes
# the fork's race certain: SIGURG (ignored) is raised while blocked, and unblocking it has it
# delivered just before a syscall (a read of 0 bytes), which runs within the signal's step.
KNOWN = {
    "exit3": (".globl _start\n_start:\n mov $60, %eax\n mov $7, %edi\n syscall\n", 3, 7),
    "fork7": (".globl _start\n_start:\n mov $57, %eax\n syscall\n test %eax, %eax\n"
              " jz 1f\n mov $60, %eax\n mov $5, %edi\n syscall\n"
              "1: mov $60, %eax\n mov $0, %edi\n syscall\n", 7, 5),
    "cpuid10": (".globl _start\n_start:\n xor %eax, %eax\n xor %ecx, %ecx\n cpuid\n nop\n"
                " xor %eax, %eax\n cpuid\n mov %eax, %eax\n mov $60, %eax\n mov $0, %edi\n"
                " syscall\n", 10, 0),
    "urg22": (".globl _start\n_start:\n push $0x400000\n mov $14, %eax\n xor %edi, %edi\n"
              " mov %rsp, %rsi\n xor %edx, %edx\n mov $8, %r10d\n syscall\n mov $39, %eax\n"
              " syscall\n mov %eax, %edi\n mov $23, %esi\n mov $62, %eax\n syscall\n"
              " mov $14, %eax\n mov $1, %edi\n mov %rsp, %rsi\n xor %edx, %edx\n syscall\n"
              " syscall\n mov $60, %eax\n mov $0, %edi\n syscall\n", 22, 0),
}
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    for name, (asm, want, status) in KNOWN.items():
        exe = cc(tmp, name + ".S", asm, "-nostdlib", "-static")
        built = exe is not None
        for engine in ("dbt", "ptrace") if built else ():
            r = count([exe], engine=engine)
            rep = c.report(r, "%s %s" % (engine, name), engine)
            if rep:
                c.eq(rep["instructions"], want, "%s %s: %d instructions" % (engine, name, want))
                c.eq(rep["exit"], {"status": status},
                     "%s %s: exit status %d" % (engine, name, status))
        c.ok(built, "cc builds " + name)

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
    exe = cc(tmp, "signals.c", SIGNALS_C, "-O2")
    if c.ok(exe, "cc builds the signals program"):
        check([exe], "signals: synchronous handlers")
        nat = native([exe, "timer"])
        r = count([exe, "timer"], engine="dbt")
        rep = c.report(r, "signals: every 100 us", "dbt")
        c.same_as_native(r, nat, "signals: every 100 us")
        if rep:
            c.ok("warning" not in rep, "signals: every 100 us: no warning", rep.get("warning"))

# Two signals at once, as CPython's test_stress_delivery_simultaneous sends them: SIGUSR1
# from kill() and a SIGALRM a few microseconds later, which often comes while the runtime
# handles the first handler's sigreturn (deferred, then sent again: its frame must go below
# the one being returned through) or while it defers another (both are kept).  A lost signal
# shows as a round waited 5 s for; a clobbered frame as a hang.
SIGRACE_C = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
static volatile sig_atomic_t got[2]; /* a handler never interrupts itself: no add is lost */
static void on_sig(int sig)
{
	got[sig == SIGALRM]++;
}
int main(int argc, char **argv)
{
	int n = atoi(argv[1]), lost = 0;
	struct sigaction sa = {.sa_handler = on_sig};

	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	srand(1);
	for (int i = 0; i < n; i++) {
		struct itimerval it = {.it_value = {0, 1 + rand() % 10}};
		struct timespec t0, now, nap = {0, 10000};

		setitimer(ITIMER_REAL, &it, NULL);
		kill(getpid(), SIGUSR1);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (got[0] <= i || got[1] <= i) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - t0.tv_sec > 5) {
				lost++;
				break;
			}
			nanosleep(&nap, NULL);
		}
	}
	printf("%d rounds, %d signals, %d lost\n", n, (int)(got[0] + got[1]), lost);
	return lost != 0;
}
"""

with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    exe = cc(tmp, "sigrace.c", SIGRACE_C, "-O2")
    if c.ok(exe, "cc builds the sigrace program"):
        for run in range(3):
            what = "sigrace run %d: 20000 SIGUSR1+SIGALRM pairs" % (run + 1)
            r = count([exe, "20000"], engine="dbt", timeout=120)
            rep = c.report(r, what, "dbt")
            c.eq(r.out, "20000 rounds, 40000 signals, 0 lost\n", what + ": none lost", r)
            if rep:
                c.ok("warning" not in rep, what + ": no warning", rep.get("warning"))

# A program killed by a signal: its threads still running then never report their count,
# so the report must say so, also when a thread that ended before did report one.
KILLED_C = r"""
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
static void *work(void *a)
{
	volatile long s = 0;

	for (long i = 0; i < 100000; i++)
		s += i;
	return a;
}
int main(void)
{
	pthread_t t;

	pthread_create(&t, NULL, work, NULL);
	pthread_join(t, NULL);
	puts("worker done");
	fflush(stdout);
	raise(SIGTERM);
	return 0;
}
"""

with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    exe = cc(tmp, "killed.c", KILLED_C, "-O2", "-pthread")
    if c.ok(exe, "cc builds the killed program"):
        r = count([exe], engine="dbt")
        rep = c.report(r, "killed by SIGTERM after a thread ended", "dbt")
        c.same_as_native(r, native([exe]), "killed by SIGTERM after a thread ended")
        if rep:
            c.ok(rep["instructions"] > 500000, "killed by SIGTERM: the ended thread's count",
                 rep["instructions"])
            c.ok("killed by a signal" in rep.get("warning", ""),
                 "killed by SIGTERM: the report says the live threads are not counted",
                 rep.get("warning"))

# What a handler reads in its ucontext is the program's pc, not the cache's: the faulting
# instruction's for SIGSEGV (the handler then moves it on), the one after the syscall
# (and in rcx) for a signal sent by the program itself.
SIGPC_C = r"""
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
extern char fault_at[], fault_after[], kill_after[];
static volatile long seen[3];
static void on_segv(int sig, siginfo_t *si, void *p)
{
	ucontext_t *uc = p;

	seen[0] = (long)uc->uc_mcontext.gregs[REG_RIP] - (long)fault_at;
	uc->uc_mcontext.gregs[REG_RIP] = (greg_t)fault_after;
}
static void on_usr1(int sig, siginfo_t *si, void *p)
{
	ucontext_t *uc = p;

	seen[1] = (long)uc->uc_mcontext.gregs[REG_RIP] - (long)kill_after;
	seen[2] = (long)uc->uc_mcontext.gregs[REG_RCX] - (long)kill_after;
}
int main(void)
{
	struct sigaction sa;
	long r;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sa, NULL);
	sa.sa_sigaction = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	__asm__ volatile(".globl fault_at, fault_after\n"
			 "fault_at: movq $1, 0\n"
			 " movq $2, %%rax\n"
			 "fault_after: movq $3, %%rax\n" : "=a"(r) :: "memory");
	printf("rax %ld\n", r);
	__asm__ volatile(".globl kill_after\n syscall\nkill_after:\n"
			 : "=a"(r) : "a"(SYS_tgkill), "D"(getpid()), "S"(gettid()), "d"(SIGUSR1)
			 : "rcx", "r11", "memory");
	printf("segv at +%ld, usr1 at +%ld, rcx +%ld, tgkill %ld\n", seen[0], seen[1], seen[2], r);
	return 0;
}
"""
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    exe = cc(tmp, "sigpc.c", SIGPC_C, "-O2")
    if c.ok(exe, "cc builds the sigpc program"):
        nat = native([exe])
        r = count([exe], engine="dbt")
        rep = c.report(r, "sigpc", "dbt")
        c.same_as_native(r, nat, "sigpc")
        c.eq(r.out, "rax 3\nsegv at +0, usr1 at +0, rcx +0, tgkill 0\n",
             "sigpc: handlers read the program's pc")

# Signals on an alternate stack, nested and delivered together (CPython's signal tests
# send them so): each handler runs on the stack its flags ask for, none is lost.
nat = native([target("sigstack"), "300"])
r = count([target("sigstack"), "300"], engine="dbt")
rep = c.report(r, "sigstack", "dbt")
c.same_as_native(r, nat, "sigstack")
c.eq(r.out, "1500 signals, 1200 on the alternate stack, 300 off it, all as promised\n",
     "sigstack: handlers on the stacks they asked for, no signal lost")

# 8 threads, each unwinding its own stack with glibc's backtrace() (libgcc's unwinder reads
# the return addresses the cache pushed) and from a C++ exception thrown through frames:
# the same names, in the same order, as natively.
BT_CC = r"""
#include <execinfo.h>
#include <pthread.h>
#include <stdexcept>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" __attribute__((noinline)) int bt_leaf(char *out, size_t cap)
{
	void *pcs[16];
	int n = backtrace(pcs, 16);
	char **names = backtrace_symbols(pcs, n);
	size_t at = 0;

	for (int i = 0; i < n && names; i++) {
		const char *open = strchr(names[i], '('), *plus = open ? strchr(open, '+') : 0;
		if (open && plus && plus > open + 1 && at + (plus - open) + 2 < cap)
			at += snprintf(out + at, cap - at, "%.*s ", (int)(plus - open - 1), open + 1);
	}
	free(names);
	return n;
}
extern "C" __attribute__((noinline)) int bt_mid(char *out, size_t cap, int d)
{
	int r = d ? bt_mid(out, cap, d - 1) : bt_leaf(out, cap);
	__asm__ volatile("" : "+r"(r));
	if (d == 2)
		throw std::runtime_error("deep");
	return r;
}
static char seen[8][512];
static void *worker(void *arg)
{
	long id = (long)arg;
	try {
		bt_mid(seen[id], sizeof(seen[id]), 3);
	} catch (const std::exception &e) {
		strncat(seen[id], e.what(), 16);
	}
	return 0;
}
int main()
{
	pthread_t t[8];
	for (long i = 0; i < 8; i++)
		pthread_create(&t[i], 0, worker, (void *)i);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], 0);
	for (int i = 0; i < 8; i++)
		printf("%d: %s\n", i, seen[i]);
	return 0;
}
"""
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    exe = cc(tmp, "bt.cc", BT_CC, "-O1", "-rdynamic", "-pthread", compiler="c++")
    if c.ok(exe, "c++ builds the backtrace program"):
        nat = native([exe])
        c.ok(nat.rc == 0 and nat.out.count("bt_leaf bt_mid bt_mid bt_mid bt_mid") == 8
             and nat.out.count("deep") == 8, "backtrace: natively, 8 threads unwind and throw",
             nat)
        r = count([exe], engine="dbt")
        rep = c.report(r, "backtrace", "dbt")
        c.same_as_native(r, nat, "backtrace: 8 threads, backtrace() and a C++ exception")
        if rep:
            c.eq(len(rep["threads"]), 9, "backtrace: 9 threads counted", rep["threads"])

# Exact under asynchronous signals: the handler (2 instructions, then glibc's 2-instruction
# restorer) interrupts a loop wherever the timer fires, the count's own sequence included;
# count - 4 * ticks must not depend on where or how often it did.
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    exe = cc(tmp, "ticks.c", TICKS_C, "-O2", "-no-pie")
    if c.ok(exe, "cc builds the ticks program"):
        base = set()
        for i in range(3):
            r = count([exe], engine="dbt")
            rep = c.report(r, "ticks run %d" % i, "dbt")
            if rep and r.rc == 0:
                base.add(rep["instructions"] - 4 * int(r.out.split()[0], 16))
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
        libs.append(cc(tmp, name + ".c", body, "-O2", "-shared", "-fPIC",
                       out="lib%s.so" % name))
    exe = cc(tmp, "dl.c", DL_MAIN, "-O2")
    built = all(libs) and exe is not None
    if c.ok(built, "cc builds the dlopen program and its two libraries"):
        argv = [exe] + libs
        check(argv, "dlopen, dlclose, dlopen")
        r = count(argv, engine="dbt")
        c.eq(r.out, "11\n43\nsame address: 1\n", "dlopen: each library's f ran, at one address")

check(["/bin/true"], "/bin/true")
check([target("compute-O2")], "compute-O2")
check([target("sigmask")], "sigmask")
check([target("forkexec"), "fork"], "forkexec fork")
check([target("forkexec"), "vfork"], "forkexec vfork")

# Threads: 4 threads started with raw clone, each counted in its own block.  After the
# clone, worker i runs test, jz, lea, imul, 1000 * (i + 1) rounds of dec and jnz, then mov,
# xor, syscall: 7 + 2000 * (i + 1) instructions, whatever the threads' interleaving.  The
# main thread waits for each worker's tid to be cleared (futex), so its own count varies.
# Their stacks are 4 KiB: the runtime's C code must run on a stack of its own.
THREADS_S = r"""
#define FLAGS 0x350f00 /* VM FS FILES SIGHAND THREAD SYSVSEM PARENT_SETTID CHILD_CLEARTID */
.globl _start
_start:
	xor %ebx, %ebx
1:	mov $56, %eax
	mov $FLAGS, %edi
	lea stacks+4096(%rip), %rsi
	mov %rbx, %rcx
	shl $12, %rcx
	add %rcx, %rsi
	lea tids(%rip), %rdx
	lea (%rdx,%rbx,4), %rdx
	mov %rdx, %r10
	xor %r8d, %r8d
	syscall
	test %rax, %rax
	jz worker
	inc %ebx
	cmp $4, %ebx
	jne 1b
	xor %ebx, %ebx
2:	lea tids(%rip), %rdi
	lea (%rdi,%rbx,4), %rdi
	mov (%rdi), %edx
	test %edx, %edx
	jz 3f
	mov $202, %eax
	xor %esi, %esi /* FUTEX_WAIT */
	xor %r10d, %r10d
	syscall
	jmp 2b
3:	inc %ebx
	cmp $4, %ebx
	jne 2b
	mov $1, %eax
	mov $1, %edi
	lea msg(%rip), %rsi
	mov $8, %edx
	syscall
	mov $231, %eax
	xor %edi, %edi
	syscall
worker:
	lea 1(%rbx), %rcx
	imul $1000, %rcx, %rcx
4:	dec %rcx
	jnz 4b
	mov $60, %eax
	xor %edi, %edi
	syscall
	.data
msg:	.ascii "4 done!\n"
	.bss
	.p2align 12
stacks:	.skip 4 * 4096
tids:	.skip 16
"""
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    exe = cc(tmp, "threads4.S", THREADS_S, "-nostdlib", "-static")
    if c.ok(exe, "cc builds threads4"):
        r = count([exe], engine="dbt")
        rep = c.report(r, "threads4", "dbt")
        c.eq((r.rc, r.out), (0, "4 done!\n"), "threads4: output and status")
        if rep:
            th = rep["threads"]
            c.eq(len(th), 5, "threads4: 5 threads", th)
            c.eq([t["instructions"] for t in th[1:]], [7 + 2000 * i for i in range(1, 5)],
                 "threads4: each worker's count, in creation order")
            c.eq(rep["instructions"], sum(t["instructions"] for t in th),
                 "threads4: the total is the threads' sum")
            c.ok(len(set(t["tid"] for t in th)) == 5, "threads4: distinct tids", th)

# pthreads: the 4 workers of threads-O2 run 300 more rounds each (17 instructions a round
# at -O2, as the ptrace engine counts them: 5403, 10503, 15603, 20703 here), and a real
# threaded compressor gives the native output.
argv = [target("threads-O2"), "3"]
nat = native(argv)
r = count(argv, engine="dbt")
rep = c.report(r, "threads-O2", "dbt")
c.same_as_native(r, nat, "threads-O2")
if rep:
    p = sorted(t["instructions"] for t in rep["threads"])
    c.eq(len(p), 5, "threads-O2: 5 threads", p)
    c.eq([b - a for a, b in zip(p[:3], p[1:4])], [5100] * 3,
         "threads-O2: 300 rounds more each", p)
    c.ok("warning" not in rep, "threads-O2: no warning", rep.get("warning"))
with tempfile.TemporaryDirectory(prefix="tp-dbt-") as tmp:
    data = os.path.join(tmp, "data")
    with open(data, "wb") as f:
        for i in range(40000):
            f.write(b"%d %x line of text\n" % (i, i * i))
    argv = ["pigz", "-p", "2", "-b", "128", "-k", "-f", data]
    nat = native(argv)
    os.rename(data + ".gz", data + ".native.gz")
    r = count(argv, engine="dbt")
    rep = c.report(r, "pigz -p 2", "dbt")
    outs = []
    for name in (data + ".gz", data + ".native.gz"):
        with open(name, "rb") if os.path.exists(name) else open(os.devnull, "rb") as f:
            outs.append(f.read())
    c.ok(nat.rc == 0 and r.rc == 0 and outs[0] == outs[1] and outs[0],
         "pigz -p 2: the file compressed as natively", (r.rc, len(outs[0]), len(outs[1])))
    if rep:
        c.ok(len(rep["threads"]) >= 3, "pigz -p 2: its threads counted", rep["threads"])

# python3 itself, with a thread.
PY = ("import threading, json; t = threading.Thread(target=print, "
      "args=(json.dumps({'a': [1, 2]}),)); t.start(); t.join()")
if os.access("/usr/bin/python3", os.X_OK):
    argv = ["/usr/bin/python3", "-c", PY]
    nat = native(argv)
    r = count(argv, engine="dbt")
    rep = c.report(r, "python3 with a thread", "dbt")
    c.same_as_native(r, nat, "python3 with a thread")
    c.eq(r.out, '{"a": [1, 2]}\n', "python3 with a thread: its output")
    if rep:
        c.eq(len(rep["threads"]), 2, "python3 with a thread: 2 threads", rep["threads"])
        c.ok("warning" not in rep, "python3 with a thread: no warning", rep.get("warning"))

c.done()
