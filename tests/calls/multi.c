/* Targets of `tracepad calls` tests, one subcommand each: threads, nest, forkexec, longjmp,
 * loop (attach/detach), badexec, spawn, cold, errno, signal, sigign, rec, threxit, threxec,
 * dlopen, vfork, wait, notsc, sigloop, sigpair.  Each prints what the tracer must have seen (tids,
 * pids, results) so the tests compare the trace with the program's own account. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "lib.h"

struct worker {
	pthread_t th;
	int k;
	pid_t tid;
	long calls, sum, failures;
};

static pthread_barrier_t start;
static atomic_int stop;
static double run_for;
static long scale = 1;

/* threads [SCALE]: thread k calls tpc_add(k + 1, j) 300 * (k + 2) * SCALE times, all 4 at
 * once (SCALE for the benchmark). */
static void *adder(void *arg)
{
	struct worker *w = arg;

	w->tid = gettid();
	pthread_barrier_wait(&start);
	for (long j = 0; j < 300 * (w->k + 2) * scale; j++) {
		w->sum += tpc_add(w->k + 1, (int)j);
		w->calls++;
	}
	return NULL;
}

static int cmd_threads(void)
{
	struct worker w[4] = {0};

	pthread_barrier_init(&start, NULL, 4);
	for (int k = 0; k < 4; k++) {
		w[k].k = k;
		pthread_create(&w[k].th, NULL, adder, &w[k]);
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(w[k].th, NULL);
		printf("thread %d tid %d calls %ld sum %ld\n", k, (int)w[k].tid, w[k].calls,
		       w[k].sum);
	}
	return 0;
}

/* nest [ROUNDS]: nested and tail calls, ROUNDS times 20 ms apart (tracepad drains between). */
static int cmd_nest(int rounds)
{
	for (int r = 0; r < rounds; r++) {
		if (r)
			usleep(20000);
		for (int x = 1; x <= 3; x++)
			printf("a %d = %d\n", x, tpc_a(x));
		for (int x = 1; x <= 3; x++)
			printf("tail %d = %d\n", x, tpc_tail(x));
		fflush(stdout);
	}
	return 0;
}

/* forkexec PROG: the parent calls tpc_add(1, i) 30 times, forks a child that calls
 * tpc_add(2, i) 20 times and execs PROG 10, then calls tpc_add(1, 100 + i) 5 times. */
static int cmd_forkexec(const char *prog)
{
	long sum = 0;
	int status;
	pid_t child;

	printf("parent %d\n", (int)getpid());
	for (int i = 0; i < 30; i++)
		sum += tpc_add(1, i);
	fflush(stdout);
	child = fork();
	if (child < 0)
		return perror("fork"), 1;
	if (child == 0) {
		long csum = 0;

		for (int i = 0; i < 20; i++)
			csum += tpc_add(2, i);
		printf("child %d sum %ld\n", (int)getpid(), csum);
		fflush(stdout);
		execl(prog, prog, "10", (char *)NULL);
		perror("execl");
		_exit(127);
	}
	if (waitpid(child, &status, 0) != child)
		return perror("waitpid"), 1;
	for (int i = 0; i < 5; i++)
		sum += tpc_add(1, 100 + i);
	printf("child status %d\nparent sum %ld\n", status, sum);
	return 0;
}

static int cmd_longjmp(void)
{
	jmp_buf env;
	volatile int v;

	for (v = 1; v <= 3; v++) {
		int got = setjmp(env);

		if (!got) {
			tpc_lj_outer(&env, v);
			printf("no longjmp %d\n", v);
		} else {
			printf("longjmp %d got %d\n", v, got);
		}
		printf("add %d = %d\n", v, tpc_add(v, 100));
	}
	for (int i = 1; i <= 3; i++)
		printf("catch %d = %d\n", i, tpc_lj_catch(i));
	for (int i = 1; i <= 3; i++)
		printf("after %d = %d\n", i, tpc_add(i, 200));
	return 0;
}

static void on_stop(int sig)
{
	stop = 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* loop: each thread checks every result it computes, and pauses now and then so that 4
 * threads do not take both CPUs from the tracer. */
static void *checker(void *arg)
{
	static const char *const words[] = {"zero", "one", "two", "three"};
	struct worker *w = arg;
	volatile long canary = 0x5eed0000L + w->k;
	const struct timespec pause = {0, 200000};
	double end = run_for > 0 ? now() + run_for : 0;

	w->tid = gettid();
	for (long i = 0; !stop; i++) {
		int r = tpc_add((int)i, w->k);

		if (r != (int)i + w->k || strcmp(tpc_word((int)i), words[i & 3]) ||
		    canary != 0x5eed0000L + w->k)
			w->failures++;
		w->calls++;
		if (i % 64 == 63) {
			nanosleep(&pause, NULL);
			if (end && now() >= end)
				break;
		}
	}
	return NULL;
}

/* The fifth thread of loop: a traced call in flight most of the time, so that detaching
 * finds its return address hooked. */
static void *sleeper(void *arg)
{
	struct worker *w = arg;
	double end = run_for > 0 ? now() + run_for : 0;

	w->tid = gettid();
	while (!stop && !(end && now() >= end)) {
		if (tpc_sleep(20) != 20)
			w->failures++;
		w->calls++;
	}
	return NULL;
}

/* loop SECONDS: 4 checking threads and a sleeper until SIGUSR1/SIGTERM, or for SECONDS when
 * > 0. */
static int cmd_loop(double seconds)
{
	struct worker w[5] = {0};
	struct sigaction sa = {.sa_handler = on_stop};
	long calls = 0, failures = 0;

	run_for = seconds;
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* Where Yama restricts ptrace to ancestors, let the tests' tracepad (a sibling) in. */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	for (int k = 0; k < 5; k++) {
		w[k].k = k;
		pthread_create(&w[k].th, NULL, k < 4 ? checker : sleeper, &w[k]);
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	for (int k = 0; k < 5; k++) {
		pthread_join(w[k].th, NULL);
		calls += w[k].calls;
		failures += w[k].failures;
	}
	printf("calls %ld failures %ld\n", calls, failures);
	return failures ? 1 : 0;
}

/* badexec PATH: execv of PATH (not an executable format) fails; the program goes on. */
static int cmd_badexec(const char *path)
{
	long sum = 0;

	execl(path, path, (char *)NULL);
	printf("exec failed: %s\n", strerrorname_np(errno));
	for (int i = 0; i < 5; i++)
		sum += tpc_add(i, 1);
	printf("sum %ld\n", sum);
	return 0;
}

/* spawn PATH: a child execs PATH (e.g. a shell script); the parent waits and goes on. */
static int cmd_spawn(const char *path)
{
	long sum = 0;
	int status;
	pid_t child;

	fflush(stdout);
	child = fork();
	if (child == 0) {
		execl(path, path, (char *)NULL);
		_exit(127);
	}
	if (child < 0 || waitpid(child, &status, 0) != child)
		return perror("spawn"), 1;
	for (int i = 0; i < 5; i++)
		sum += tpc_add(i, 1);
	printf("status %d sum %ld\n", status, sum);
	return 0;
}

/* cold: GCC moves the unlikely branch of tpm_work into tpm_work.cold, a fragment entered by a
 * jump with the frame's locals at the top of the stack: no function entry, no return address
 * there to hook. */
__attribute__((cold, noinline)) void tpm_report(long a, long b)
{
	printf("cold %ld %ld\n", a, b);
}

__attribute__((noinline)) long tpm_work(long x)
{
	volatile long buf[4] = {x, x + 1, x + 2, x + 3};

	if (__builtin_expect(x % 3 == 0, 0)) {
		tpm_report(buf[0], buf[1]);
		return buf[0] + buf[1] + buf[2] + buf[3] + 1000;
	}
	return buf[0] + buf[1] + buf[2] + buf[3];
}

static int cmd_cold(void)
{
	long sum = 0;

	for (long i = 0; i < 7; i++)
		sum += tpm_work(i);
	printf("sum %ld\n", sum);
	return 0;
}

/* errno: a failing open() and what errno the program itself sees afterwards. */
static int cmd_errno(void)
{
	int fd = open("/nonexistent/tracepad", O_RDONLY);
	int e = errno;

	printf("open %d errno %s\n", fd, strerrorname_np(e));
	printf("add %d\n", tpc_add(e, 1));
	return 0;
}

static volatile sig_atomic_t handled, trapped;

static void on_usr1(int sig)
{
	handled += tpc_add(7, 7);
}

static void on_trap(int sig)
{
	trapped++;
}

/* Raises SIGUSR1 while it is a traced call in flight: the handler's tpc_add is nested in it. */
__attribute__((noinline)) int tpm_raise(int x)
{
	raise(SIGUSR1);
	return x + 1;
}

/* signal: handlers that call traced functions, and SIGTRAPs of the program's own (raise and
 * an int3 of its code) that must reach its handler, not the tracer. */
static int cmd_signal(void)
{
	struct sigaction usr = {.sa_handler = on_usr1}, trap = {.sa_handler = on_trap};
	int sum = 0;

	sigaction(SIGUSR1, &usr, NULL);
	sigaction(SIGTRAP, &trap, NULL);
	for (int i = 0; i < 3; i++)
		sum += tpm_raise(i);
	raise(SIGTRAP);
	raise(SIGTRAP);
	__asm__ volatile("int3");
	printf("raise sum %d handled %d trapped %d\n", sum, (int)handled, (int)trapped);
	return 0;
}

/* sigign: SIGTRAP ignored, then blocked with a handler, around traced calls; a raised SIGTRAP
 * is then ignored, and delivered once when unblocked. */
static int cmd_sigign(void)
{
	struct sigaction trap = {.sa_handler = on_trap};
	sigset_t set;
	int sum;

	signal(SIGTRAP, SIG_IGN);
	sum = tpc_add(1, 2);
	raise(SIGTRAP);
	sigaction(SIGTRAP, &trap, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGTRAP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sum += tpc_add(3, 4);
	raise(SIGTRAP);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	printf("sigign sum %d trapped %d\n", sum, (int)trapped);
	return 0;
}

/* rec N: one traced call N levels deep. */
static int cmd_rec(int n)
{
	printf("rec %d = %d\n", n, tpc_rec(n));
	return 0;
}

static void *exiter(void *arg)
{
	int k = (int)(long)arg;

	tpc_add(k, 10);
	tpc_thread_exit(k + 100);
	return NULL;
}

/* threxit: 4 threads end inside a traced call (pthread_exit); then more traced calls. */
static int cmd_threxit(void)
{
	pthread_t th[4];
	long sum = 0;

	for (long k = 0; k < 4; k++)
		pthread_create(&th[k], NULL, exiter, (void *)k);
	for (int k = 0; k < 4; k++) {
		void *v;

		pthread_join(th[k], &v);
		sum += (long)v;
	}
	for (int i = 0; i < 3; i++)
		sum += tpc_add(i, 20);
	printf("threxit sum %ld\n", sum);
	return 0;
}

static void *execer(void *arg)
{
	const char *prog = arg;

	tpc_add(8, 1);
	execl(prog, prog, "10", (char *)NULL);
	perror("execl");
	exit(127);
}

/* threxec PROG: a second thread execs PROG 10 while the main thread is blocked in a join; the
 * kernel gives the new image the process's pid. */
static int cmd_threxec(const char *prog)
{
	pthread_t th;

	printf("threxec %d\n", (int)getpid());
	fflush(stdout);
	tpc_add(7, 1);
	pthread_create(&th, NULL, execer, (void *)prog);
	pthread_join(th, NULL);
	return 1;
}

/* dlopen PATH: 3 rounds of dlopen, 10 calls of tpd_mul(round, i), dlclose. */
static int cmd_dlopen(const char *path)
{
	long sum = 0;

	for (int round = 1; round <= 3; round++) {
		void *h = dlopen(path, RTLD_NOW);
		int (*mul)(int, int);

		if (!h)
			return fprintf(stderr, "dlopen: %s\n", dlerror()), 1;
		mul = (int (*)(int, int))dlsym(h, "tpd_mul");
		if (!mul)
			return fprintf(stderr, "dlsym: %s\n", dlerror()), 1;
		for (int i = 0; i < 10; i++)
			sum += mul(round, i);
		dlclose(h);
		sum += tpc_add(round, 0);
	}
	printf("dlopen sum %ld\n", sum);
	return 0;
}

/* vfork PROG: the child shares our memory (and our breakpoints) until it execs PROG 10. */
static int cmd_vfork(const char *prog)
{
	int status;
	volatile long sum = 0; /* the vfork child runs on our stack */
	pid_t child;

	for (int i = 0; i < 5; i++)
		sum += tpc_add(5, i);
	fflush(stdout);
	child = vfork();
	if (child == 0) {
		execl(prog, prog, "10", (char *)NULL);
		_exit(127);
	}
	if (child < 0 || waitpid(child, &status, 0) != child)
		return perror("vfork"), 1;
	for (int i = 0; i < 5; i++)
		sum += tpc_add(6, i);
	printf("vfork status %d sum %ld\n", status, sum);
	return 0;
}

/* wait: tpc_add(1, 2), then wait for a line on stdin, then tpc_add(3, 4). */
static int cmd_wait(void)
{
	char buf[16];

	printf("first %d\n", tpc_add(1, 2));
	fflush(stdout);
	if (!fgets(buf, sizeof(buf), stdin))
		return 1;
	printf("second %d\n", tpc_add(3, 4));
	return 0;
}

/* sigframe: tpc_probe's load (its second instruction, inside the 5 bytes a jump pad takes)
 * faults; the SIGSEGV handler points the load at a value and waits for tpc_probe's first byte
 * to change (a tracer hooked it, attached meanwhile) before it returns to the load.  Prints
 * the probe's result (42) and another call's, then waits for the end of stdin. */
__asm__(".text\n.globl tpc_probe\n.type tpc_probe, @function\n.p2align 4\ntpc_probe:\n"
	"\txorl %eax, %eax\n\tmovl (%rdi), %eax\n\taddl $1, %eax\n\tret\n"
	".size tpc_probe, .-tpc_probe\n");
int tpc_probe(const int *p);
static const int probe_value = 41;
static volatile sig_atomic_t probe_faults;

static void on_probe_fault(int sig, siginfo_t *si, void *ctx)
{
	static const char msg[] = "in handler\n";
	const volatile uint8_t *code = (const volatile uint8_t *)(uintptr_t)tpc_probe;
	const uint8_t first = code[0];
	const struct timespec ms = {0, 1000000};
	ucontext_t *uc = ctx;

	(void)sig;
	(void)si;
	probe_faults++;
	uc->uc_mcontext.gregs[REG_RDI] = (greg_t)(uintptr_t)&probe_value;
	if (write(1, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	for (int i = 0; i < 60000 && code[0] == first; i++)
		nanosleep(&ms, NULL);
}

static int cmd_sigframe(void)
{
	struct sigaction sa = {.sa_sigaction = on_probe_fault, .sa_flags = SA_SIGINFO};
	char buf[64];
	int v;

	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	sigaction(SIGSEGV, &sa, NULL);
	v = tpc_probe(NULL);
	printf("probe %d faults %d\n", v, (int)probe_faults);
	printf("again %d\n", tpc_probe(&probe_value));
	fflush(stdout);
	while (fgets(buf, sizeof(buf), stdin))
		;
	return 0;
}

static atomic_int sig_calls, sig_bad;
static double sig_for;

static atomic_int sig_done;
static int sig_periodic;

/* The next SIGALRM 100 us after this one's handler: one that waited on a tracer longer than
 * that would otherwise find the next already pending, and the loop might never run again.
 * Periodic (every 100 us whatever happens): a storm, for attaches that need no progress. */
static void alarm_arm(void)
{
	struct itimerval it = {{0, sig_periodic ? 100 : 0}, {0, 100}};

	setitimer(ITIMER_REAL, &it, NULL);
}

static void on_alarm(int sig)
{
	int v = (atomic_fetch_add(&sig_calls, 1) + 1) & 0xff, e = errno;

	(void)sig;
	if (tpc_add(v, 1) != v + 1)
		atomic_fetch_add(&sig_bad, 1);
	if (!sig_periodic && !atomic_load(&sig_done))
		alarm_arm();
	errno = e;
}

/* One thread of sigloop: tpc_add in a loop for sig_for seconds; its bad results. */
static void *sig_worker(void *arg)
{
	struct worker *w = arg;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 100; i++, w->calls++)
			w->failures +=
			    tpc_add(i, (int)w->calls & 0xff) != i + ((int)w->calls & 0xff);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 < sig_for &&
		 !atomic_load(&stop));
	return NULL;
}

/* sigloop S [N [periodic]]: for S seconds (or until SIGUSR1), N threads (1 by default) call tpc_add
 * in a loop while a SIGALRM handler, 100 us after it last ran, calls it too: signals land anywhere,
 * also in tracepad's slots, trampoline and stubs, and in several threads at once. */
static int cmd_sigloop(double seconds, int nthreads)
{
	struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
	struct sigaction usr = {.sa_handler = on_stop};
	struct itimerval it = {{0, 0}, {0, 0}};
	struct worker w[8] = {0};
	long calls = 0, bad = 0;
	int n = nthreads < 1 ? 1 : nthreads > 8 ? 8 : nthreads;

	sig_for = seconds;
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	sigaction(SIGALRM, &sa, NULL);
	sigaction(SIGUSR1, &usr, NULL);
	alarm_arm();
	for (int k = 1; k < n; k++)
		pthread_create(&w[k].th, NULL, sig_worker, &w[k]);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	sig_worker(&w[0]);
	for (int k = 1; k < n; k++)
		pthread_join(w[k].th, NULL);
	atomic_store(&sig_done, 1);
	setitimer(ITIMER_REAL, &it, NULL);
	for (int k = 0; k < n; k++) {
		calls += w[k].calls;
		bad += w[k].failures;
	}
	printf("sigloop calls %ld bad %ld handled %d bad %d\n", calls, bad, atomic_load(&sig_calls),
	       atomic_load(&sig_bad));
	return bad || atomic_load(&sig_bad) ? 1 : 0;
}

/* sigpair: the main thread calls tpc_add in a loop while two threads each send it their own
 * signal (SIGUSR1, SIGUSR2) and wait until it is handled before the next, so that both can
 * be pending at once: a tracer that holds them back must give both back.  A line on stdin
 * (or its end) stops it; a signal not handled within 10 s is lost. */
static pid_t pair_tid;
static atomic_long pair_handled[2];
static atomic_int pair_end, pair_lost;

static void on_pair(int sig)
{
	atomic_fetch_add(&pair_handled[sig == SIGUSR2], 1);
}

static void *pair_sender(void *arg)
{
	long k = (long)arg, sent = 0;
	struct timespec nap = {0, 20000};

	while (!atomic_load(&pair_end)) {
		struct timespec t0, t;

		sent++;
		syscall(SYS_tgkill, getpid(), pair_tid, k ? SIGUSR2 : SIGUSR1);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (atomic_load(&pair_handled[k]) < sent) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 10) {
				atomic_fetch_add(&pair_lost, 1);
				return (void *)sent;
			}
			nanosleep(&nap, NULL);
		}
	}
	return (void *)sent;
}

static void *pair_stdin(void *arg)
{
	char line[64];

	(void)arg;
	if (!fgets(line, sizeof(line), stdin))
		line[0] = 0;
	atomic_store(&pair_end, 1);
	return NULL;
}

static int cmd_sigpair(void)
{
	struct sigaction sa = {.sa_handler = on_pair, .sa_flags = SA_RESTART};
	pthread_t th[3];
	void *sent[2];
	long calls = 0, bad = 0;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	pair_tid = (pid_t)syscall(SYS_gettid);
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	for (long k = 0; k < 2; k++)
		pthread_create(&th[k], NULL, pair_sender, (void *)k);
	pthread_create(&th[2], NULL, pair_stdin, NULL);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (!atomic_load(&pair_end))
		for (int i = 0; i < 100; i++, calls++)
			bad += tpc_add(i, (int)calls & 0xff) != i + ((int)calls & 0xff);
	for (int k = 0; k < 3; k++)
		pthread_join(th[k], k < 2 ? &sent[k] : NULL);
	printf("sigpair sent %ld %ld handled %ld %ld lost %d bad %ld\n", (long)sent[0],
	       (long)sent[1], atomic_load(&pair_handled[0]), atomic_load(&pair_handled[1]),
	       atomic_load(&pair_lost), bad);
	return atomic_load(&pair_lost) || bad ? 1 : 0;
}

static sigjmp_buf notsc_jb;

static void notsc_segv(int sig)
{
	(void)sig;
	siglongjmp(notsc_jb, 1);
}

/* notsc: rdtsc faults from here on (PR_SET_TSC); tpc_add(i, 1) for i < 5; then the
 * program's own rdtsc, which must still fault. */
static int cmd_notsc(void)
{
	struct sigaction sa = {.sa_handler = notsc_segv};
	volatile int faulted = 0;
	long sum = 0;

	if (prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0)) {
		perror("prctl");
		return 1;
	}
	for (int i = 0; i < 5; i++)
		sum += tpc_add(i, 1);
	printf("notsc sum %ld\n", sum);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	if (!sigsetjmp(notsc_jb, 1)) {
		uint32_t lo, hi;

		__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
		(void)lo, (void)hi;
	} else {
		faulted = 1;
	}
	printf("own rdtsc %s\n", faulted ? "faulted" : "ran");
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (!strcmp(cmd, "threads")) {
		scale = argc > 2 ? atol(argv[2]) : 1;
		return cmd_threads();
	}
	if (!strcmp(cmd, "nest"))
		return cmd_nest(argc > 2 ? atoi(argv[2]) : 1);
	if (!strcmp(cmd, "forkexec") && argc > 2)
		return cmd_forkexec(argv[2]);
	if (!strcmp(cmd, "longjmp"))
		return cmd_longjmp();
	if (!strcmp(cmd, "loop"))
		return cmd_loop(argc > 2 ? atof(argv[2]) : 0);
	if (!strcmp(cmd, "badexec") && argc > 2)
		return cmd_badexec(argv[2]);
	if (!strcmp(cmd, "spawn") && argc > 2)
		return cmd_spawn(argv[2]);
	if (!strcmp(cmd, "cold"))
		return cmd_cold();
	if (!strcmp(cmd, "errno"))
		return cmd_errno();
	if (!strcmp(cmd, "signal"))
		return cmd_signal();
	if (!strcmp(cmd, "rec") && argc > 2)
		return cmd_rec(atoi(argv[2]));
	if (!strcmp(cmd, "threxit"))
		return cmd_threxit();
	if (!strcmp(cmd, "threxec") && argc > 2)
		return cmd_threxec(argv[2]);
	if (!strcmp(cmd, "sigign"))
		return cmd_sigign();
	if (!strcmp(cmd, "dlopen") && argc > 2)
		return cmd_dlopen(argv[2]);
	if (!strcmp(cmd, "vfork") && argc > 2)
		return cmd_vfork(argv[2]);
	if (!strcmp(cmd, "wait"))
		return cmd_wait();
	if (!strcmp(cmd, "notsc"))
		return cmd_notsc();
	if (!strcmp(cmd, "sigframe"))
		return cmd_sigframe();
	if (!strcmp(cmd, "sigpair"))
		return cmd_sigpair();
	if (!strcmp(cmd, "sigloop") && argc > 2) {
		sig_periodic = argc > 4 && !strcmp(argv[4], "periodic");
		return cmd_sigloop(atof(argv[2]), argc > 3 ? atoi(argv[3]) : 1);
	}
	fprintf(stderr,
		"usage: %s threads [SCALE]|nest [ROUNDS]|forkexec PROG|longjmp|loop [S]|badexec "
		"F|spawn "
		"F|cold|errno|signal|sigign|rec N|threxit|threxec P|dlopen L|vfork "
		"P|wait|notsc|sigloop S [N [periodic]]|sigpair\n",
		argv[0]);
	return 2;
}
