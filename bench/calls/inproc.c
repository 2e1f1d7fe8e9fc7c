/* bench/calls' in-program cost of a traced call: batches of 1000 calls of tpc_add timed by the
 * program itself, 1 ms apart (the tracer drains meanwhile, so no batch waits for it), and the
 * fastest batch's nanoseconds per call printed; also the calls made, for the tool's count.
 * Usage: inproc [BATCHES] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "lib.h"

#define PER 1000

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	int batches = argc > 1 ? atoi(argv[1]) : 300;
	double best = 1e18;
	long sum = 0;

	for (int b = 0; b < batches; b++) {
		double t0 = now_ns(), dt;

		for (int i = 0; i < PER; i++)
			sum += tpc_add(i, b);
		dt = (now_ns() - t0) / PER;
		best = dt < best ? dt : best;
		usleep(1000);
	}
	printf("calls %ld sum %ld\n", (long)batches * PER, sum);
	printf("best %.1f ns per call\n", best);
	return 0;
}
