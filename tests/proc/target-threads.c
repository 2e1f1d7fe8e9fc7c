/* Target of the proc tests: four threads, each computing a known sum; with "nested", they
 * are created by a second thread rather than by main. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define NTHREADS 4

static void *work(void *arg)
{
	long n = (long)arg, sum = 0;

	for (long i = 1; i <= 1000 * n; i++)
		sum += i;
	return (void *)sum;
}

static void *spawn_all(void *arg)
{
	pthread_t th[NTHREADS];
	long total = 0;

	for (long i = 0; i < NTHREADS; i++)
		if (pthread_create(&th[i], NULL, work, (void *)(i + 1)))
			return (void *)-1L;
	for (int i = 0; i < NTHREADS; i++) {
		void *r;

		pthread_join(th[i], &r);
		total += (long)r;
	}
	return (void *)total;
}

int main(int argc, char **argv)
{
	void *total;

	if (argc > 1 && !strcmp(argv[1], "nested")) {
		pthread_t mgr;

		if (pthread_create(&mgr, NULL, spawn_all, NULL))
			return 1;
		pthread_join(mgr, &total);
	} else {
		total = spawn_all(NULL);
	}
	/* 500500 + 2001000 + 4501500 + 8002000 */
	printf("threads=%d total=%ld\n", NTHREADS, (long)total);
	return 0;
}
