/* The program that writes the LTTng-UST fixture: two threads, each recording N events of
 * each kind; their values follow from the index, so the test knows every field.
 *   prog N */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "tp.h"

static int n;

static void *run(void *arg)
{
	static const char *words[] = {"alpha", "beta", "gamma", "delta"};
	int base = (int)(long)arg * 1000;

	for (int k = 0; k < n; k++) {
		int v = base + k;
		int arr[3] = {v, -v, v * 2};

		lttng_ust_tracepoint(tpfix, ints, v, (uint8_t)v, (int16_t)-v, (uint64_t)v << 33,
				     -(int64_t)v);
		lttng_ust_tracepoint(tpfix, misc, words[k % 4], arr, (unsigned)(k % 4), v + 0.5,
				     k % 11);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;

	n = argc > 1 ? atoi(argv[1]) : 100;
	if (!lttng_ust_tracepoint_enabled(tpfix, ints)) {
		fprintf(stderr, "prog: tpfix:ints is not enabled (no session?)\n");
		return 1;
	}
	pthread_create(&t, NULL, run, (void *)1L);
	run((void *)0L);
	pthread_join(t, NULL);
	return 0;
}
