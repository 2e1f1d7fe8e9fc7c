/* The target of gdb's fast tracepoint in tracepoints.py: gfn (target.S, its instruction at
 * gfn_at is 5 bytes, as gdb needs) called CALLS times before ready() (the baseline) and
 * twice after it (gdb's ftrace on; gdb restarts the trace at again(), so that the timed loop
 * finds its trace buffer's pages in memory, as bench-pads does) until done(), each loop timed in
 * thread CPU time (the program's own: gdbserver is not involved in a fast tracepoint's hit). */
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

static double loop(long calls)
{
	struct timespec a, b;
	volatile long sink = 0;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
	for (long i = 0; i < calls; i++)
		sink += gfn(i);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
	return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / calls;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 100000;
	double base = loop(calls), with;

	ready();
	loop(calls);
	again();
	with = loop(calls);
	done();
	printf("gdb-base ns/call %.1f\ngdb-ftrace ns/hit %.1f\n", base, with - base);
	return 0;
}
