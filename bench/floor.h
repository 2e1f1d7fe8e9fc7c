/* Shared by the floor programs of bench/count: the stepped loop, argument parsing, CPU pinning
 * and the one output line that bench/count.py parses. */
#ifndef TP_BENCH_FLOOR_H
#define TP_BENCH_FLOOR_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void bench_loop(unsigned long n);

static inline double floor_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Pins the caller (and so the children it forks afterwards) to the CPU it runs on. */
static inline int floor_pin(void)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	if (cpu < 0)
		return -1;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static inline unsigned long floor_iterations(int argc, char **argv)
{
	return argc > 1 ? strtoul(argv[1], NULL, 0) : 100000;
}

static inline void floor_print(const char *name, unsigned long insns, double seconds)
{
	printf("%s: instructions %lu seconds %.6f instructions/s %.0f\n", name, insns, seconds,
	       seconds > 0 ? insns / seconds : 0.0);
}

#endif
