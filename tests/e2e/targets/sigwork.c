/* e2e target of the tests that signal tracepad (interrupt.py): THREADS threads each run ROUNDS
 * rounds of a computation checked against its closed form, a static tracepoint and a 10 ms
 * sleep.  Prints "ready PID" first, then "rounds R threads T sum S" and exit status 0 when
 * every check held (1 and a "bad" line otherwise): an untouched program's output is known.
 * With "vfork", the main thread first waits 3 s in vfork() for a child that sleeps (a thread
 * that PTRACE_INTERRUPT cannot stop until then).
 * Usage: sigwork ROUNDS [THREADS [vfork]] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tracepad/tracepoint.h>

#define THREADS_MAX 16

TP_POINT(sw_round);

static int rounds;
static uint64_t sums[THREADS_MAX];
static int bad[THREADS_MAX];

/* 1 + 2 + ... + n, the long way: what tracing must not change. */
__attribute__((noinline)) uint64_t sw_sum_to(uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 1; i <= n; i++)
		s += i;
	__asm__ volatile("" : "+r"(s));
	return s;
}

static void *worker(void *arg)
{
	int k = (int)(intptr_t)arg;
	struct timespec ts = {0, 10 * 1000 * 1000};

	for (int i = 0; i < rounds; i++) {
		uint64_t n = (uint64_t)(i % 50) + k, s = sw_sum_to(n);

		if (s != n * (n + 1) / 2)
			bad[k]++;
		sums[k] += s;
		TP_TRACE(sw_round, "round %d of %d", i, k);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Apart from main: vfork's return twice must not clobber main's variables. */
__attribute__((noinline)) static int wait_in_vfork(void)
{
	pid_t child = vfork();

	if (child == 0) {
		struct timespec ts = {3, 0};

		nanosleep(&ts, NULL);
		_exit(0);
	}
	return child < 0;
}

int main(int argc, char **argv)
{
	pthread_t th[THREADS_MAX];
	int nthreads = argc > 2 ? atoi(argv[2]) : 1, nbad = 0;
	uint64_t sum = 0;

	rounds = argc > 1 ? atoi(argv[1]) : 100;
	if (rounds < 1 || nthreads < 1 || nthreads > THREADS_MAX) {
		fprintf(stderr, "usage: sigwork ROUNDS [THREADS <= %d]\n", THREADS_MAX);
		return 2;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	if (argc > 3 && !strcmp(argv[3], "vfork") && wait_in_vfork())
		return 1;
	for (int k = 1; k < nthreads; k++)
		if (pthread_create(&th[k], NULL, worker, (void *)(intptr_t)k))
			return 1;
	worker(0);
	for (int k = 1; k < nthreads; k++)
		pthread_join(th[k], NULL);
	for (int k = 0; k < nthreads; k++) {
		sum += sums[k];
		nbad += bad[k];
	}
	if (nbad)
		printf("bad %d\n", nbad);
	printf("rounds %d threads %d sum %llu\n", rounds, nthreads, (unsigned long long)sum);
	return nbad ? 1 : 0;
}
