/* The target of gdb's fast tracepoint in tracepoints.py: gfn (target.S, its instruction at
 * gfn_at is 5 bytes, as gdb needs) called CALLS times before ready() (the baseline) and
 * twice after it (gdb's ftrace on; gdb restarts the trace at again(), so that the timed loop
 * finds its trace buffer's pages in memory, as bench-pads does) until done(), each loop timed in
 * thread CPU time (the program's own: gdbserver is not involved in a fast tracepoint's hit) and in
 * wall time.  tracepoints.py also runs it under tracepad trace --normal and --fast, where every
 * loop is traced: their cost is the timed loop's against a run without tracing. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

long gfn(long);
long global = 0x1234;

__attribute__((noinline)) void ready(void)
{
	__asm__ volatile("" ::: "memory");
}

/* gdb restarts the trace here: the first traced loop warmed gdb's trace buffer up */
__attribute__((noinline)) void again(void)
{
	__asm__ volatile("" ::: "memory");
}

/* gdb stops here to read tstatus: the frames collected */
__attribute__((noinline)) void done(void)
{
	__asm__ volatile("" ::: "memory");
}

static double wall;

static double ns(const struct timespec *a, const struct timespec *b)
{
	return (b->tv_sec - a->tv_sec) * 1e9 + (b->tv_nsec - a->tv_nsec);
}

static double loop(long calls)
{
	struct timespec a, b, wa, wb;
	volatile long sink = 0;

	clock_gettime(CLOCK_MONOTONIC, &wa);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
	for (long i = 0; i < calls; i++)
		sink += gfn(i);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
	clock_gettime(CLOCK_MONOTONIC, &wb);
	wall = ns(&wa, &wb) / calls;
	return ns(&a, &b) / calls;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 100000;
	double base = loop(calls), wbase = wall, with;

	ready();
	loop(calls);
	again();
	with = loop(calls);
	done();
	/* thread CPU time (a fast tracepoint's hit is the program's own work) and wall time
	 * (a normal one's is mostly the tracer's): the timed loop, and what tracing added */
	printf("gdb-base ns/call %.1f\ngdb-ftrace ns/hit %.1f\n", base, with - base);
	printf("cpu ns/call %.1f\nwall ns/call %.1f\nwall-base ns/call %.1f\n", with, wall, wbase);
	return 0;
}
