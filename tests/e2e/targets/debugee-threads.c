/* A program of 3 threads for scripted gdb sessions (tests/debug): each is created once the
 * one before has been joined, so that a session's stops come in one order. */
#include <pthread.h>
#include <stdio.h>

#define NTHREADS 3

long results[NTHREADS];

__attribute__((noinline)) void *worker(void *arg)
{
	long id = (long)arg, acc = 0;

	for (long r = 0; r < 100 * (id + 1); r++)
		acc += r * (id + 1);
	results[id] = acc;
	return NULL;
}

int main(void)
{
	for (long i = 0; i < NTHREADS; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, worker, (void *)i))
			return 1;
		pthread_join(t, NULL);
	}
	for (long i = 0; i < NTHREADS; i++)
		printf("thread %ld: %ld\n", i, results[i]);
	return 0;
}
