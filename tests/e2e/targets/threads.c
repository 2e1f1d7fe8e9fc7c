/* e2e target: 4 threads each run worker(i), independent deterministic work (no locks, no
 * libc) whose size grows with i, so each thread's count identifies it across runs.
 * Both engines must agree on the per-thread counts of --start worker.
 * Usage: threads [SEED]   prints each thread's result */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NTHREADS 4

static unsigned long seed = 1;
static unsigned long results[NTHREADS];

__attribute__((noinline, noclone)) void *worker(void *arg)
{
	long id = (long)arg;
	unsigned long rounds = 300 * (id + 1), r, acc = 0;
	unsigned int x = (unsigned int)(seed + id), v[16] = {0};

	for (r = 0; r < rounds; r++) {
		x = x * 1664525u + 1013904223u;
		v[r & 15] ^= x >> 3;
		acc += v[(x >> 28) & 15] * (r | 1);
	}
	results[id] = acc;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t tids[NTHREADS];
	long i;

	if (argc > 1)
		seed = strtoul(argv[1], NULL, 0);
	for (i = 0; i < NTHREADS; i++) {
		if (pthread_create(&tids[i], NULL, worker, (void *)i)) {
			fprintf(stderr, "threads: pthread_create failed\n");
			return 1;
		}
	}
	for (i = 0; i < NTHREADS; i++)
		pthread_join(tids[i], NULL);
	for (i = 0; i < NTHREADS; i++)
		printf("thread %ld result %lx\n", i, results[i]);
	return 0;
}
