/* bench/tracepoints: per-hit cost of src/rt's jump pads with a callback that copies the
 * register record and 8 bytes of memory into a buffer, against the int3 path (the same
 * callback from the SIGTRAP dispatcher).  Each figure is the median over runs of
 * (loop with the tracepoint - loop without) / calls, and every hit is checked to have been
 * collected.  Times are the thread's CPU time (user and kernel), not wall time.
 * Usage: bench-pads [CALLS] [RUNS] */
#include "rt/pad.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GPR_ONLY __attribute__((target("general-regs-only")))

long bench_fn(long) __attribute__((noinline));
extern char bench_fn_end[];

/* What a fast tracepoint stores per hit: $regs and 8 bytes. */
struct frame {
	struct tp_rt_regs regs;
	uint64_t mem;
};
#define FRAMES 4096
static struct frame frames[FRAMES];
static uint64_t collected, failed;
static uint64_t global = 0x1234;

/* 8 bytes at the program's stack pointer (the return address here) */
static GPR_ONLY void collect_stack(const struct tp_rt_regs *r, void *ctx)
{
	struct frame *f = &frames[collected++ & (FRAMES - 1)];

	f->regs = *r;
	failed += !!tp_rt_pad_read(r, r->rsp, &f->mem, 8);
}

/* 8 bytes of a global: tp_rt_pad_read's system call */
static GPR_ONLY void collect_global(const struct tp_rt_regs *r, void *ctx)
{
	struct frame *f = &frames[collected++ & (FRAMES - 1)];

	f->regs = *r;
	failed += !!tp_rt_pad_read(r, (uint64_t)(uintptr_t)&global, &f->mem, 8);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* the machine may be shared */
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double loop(long calls)
{
	volatile long sink = 0;
	double t = now();

	for (long i = 0; i < calls; i++)
		sink += bench_fn(i);
	return (now() - t) / calls;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Median per-hit cost of a tracepoint installed with @flags calling @fn; -1 on error. */
static double per_hit(const char *name, tp_rt_pad_fn fn, unsigned flags, long calls, int runs)
{
	struct tp_rt_pad_where w = {.fn_lo = (uint64_t)(uintptr_t)bench_fn,
				    .fn_hi = (uint64_t)(uintptr_t)bench_fn_end};
	double cost[64];
	struct tp_rt_pad *p;
	int err;

	for (int r = 0; r < runs; r++) {
		double base = loop(calls), with;

		collected = failed = 0;
		err = tp_rt_pad_install((uint64_t)(uintptr_t)bench_fn, fn, NULL, flags, &w, &p);
		if (err) {
			fprintf(stderr, "%s: install: %s\n", name, strerror(-err));
			return -1;
		}
		with = loop(calls);
		tp_rt_pad_remove(p);
		if (collected != (uint64_t)calls || failed) {
			fprintf(stderr, "%s: %lu collected, %lu failed of %ld hits\n", name,
				(unsigned long)collected, (unsigned long)failed, calls);
			return -1;
		}
		if (frames[0].regs.rip != (uint64_t)(uintptr_t)bench_fn ||
		    (fn == collect_global && frames[0].mem != global)) {
			fprintf(stderr, "%s: wrong values collected\n", name);
			return -1;
		}
		cost[r] = with - base;
	}
	return median(cost, runs);
}

static int run(long calls, int runs) __attribute__((noinline));

/* The loops run with their stack pointer mid-page: 8 bytes at $rsp then lie on the page the
 * pad pushed the record on, tp_rt_pad_read's plain copy (the cost through its system call is
 * the "pad-global" line). */
int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 1000000;
	int runs = argc > 2 ? atoi(argv[2]) : 5;
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	volatile char *shift = __builtin_alloca(((sp & 4095) + 4096 - 2048) & 4095);

	shift[0] = 0;
	return run(calls, runs);
}

static int run(long calls, int runs)
{
	/* the int3 path costs a signal (~6 us here): fewer calls */
	long tcalls = calls / 100 > 1000 ? calls / 100 : 1000;
	double pad, fpu, glob, trap;

	if (runs < 1 || runs > 64)
		runs = 5;
	printf("calls %ld runs %d\n", calls, runs);
	printf("baseline ns/call %.1f\n", loop(calls));
	pad = per_hit("pad", collect_stack, TP_RT_PAD_STOPPED, calls, runs);
	fpu = per_hit("pad+xsave", collect_stack, TP_RT_PAD_STOPPED | TP_RT_PAD_FPU, calls, runs);
	glob = per_hit("pad, global", collect_global, TP_RT_PAD_STOPPED, tcalls, runs);
	trap = per_hit("int3", collect_stack, TP_RT_PAD_TRAP, tcalls, runs);
	if (pad < 0 || fpu < 0 || glob < 0 || trap < 0)
		return 1;
	printf("pad ns/hit %.1f\n", pad);
	printf("pad-xsave ns/hit %.1f\n", fpu);
	printf("pad-global ns/hit %.1f\n", glob);
	printf("int3 ns/hit %.1f\n", trap);
	return 0;
}
