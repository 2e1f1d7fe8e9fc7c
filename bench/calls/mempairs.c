/* bench/calls/memory.py's target: N malloc/free pairs of 16 to 79 bytes, nothing else; prints
 * the CPU time its thread spent in the loop per pair (what tracing adds inside the program;
 * time spent waiting for the tracer is no CPU time and shows in the wall time only). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	unsigned long sum = 0;
	double t0 = cpu_ns();

	for (long i = 0; i < n; i++) {
		char *volatile p = malloc(16 + (size_t)(i % 64));

		sum += (unsigned long)(p != NULL);
		free(p);
	}
	printf("pairs %lu cpu_ns_per_pair %.1f\n", sum, (cpu_ns() - t0) / (n ? n : 1));
	return 0;
}
