/* bp test target: 4 threads each call work() N times (argv[1]) concurrently; prints the
 * total so the test can compare it with the breakpoint's hit count. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long n = 2000;

__attribute__((noinline, noclone)) long work(long *acc, long i)
{
	*acc += i;
	return *acc;
}

static void *run(void *arg)
{
	long acc = 0, *calls = arg;

	for (long i = 0; i < n; i++) {
		work(&acc, i);
		(*calls)++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[4];
	long calls[4] = {0}, total = 0;

	if (argc > 1)
		n = atol(argv[1]);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, run, &calls[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		total += calls[i];
	}
	printf("calls %ld\n", total);
	return 3;
}
