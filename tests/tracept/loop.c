/* Target of the `tracepad trace` tests: f(i, &pt) called for i = 0..N-1 (in T threads, or
 * for ever with "spin"), so that the tests know what each tracepoint must see: the i of
 * every call, pt.x = 3i, pt.y = i, pt.name = "pt", g_counter, the sum it prints. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct point {
	int x;
	long y;
	char name[8];
};

struct point pts[8];
int g_counter;
static int slow;

__attribute__((noinline)) int f(int i, struct point *p)
{
	int sq = i * i;

	__atomic_add_fetch(&g_counter, i, __ATOMIC_RELAXED);
	return sq + p->x;
}

static long run(int n)
{
	long sum = 0;

	for (int i = 0; i < n; i++) {
		struct point pt = {i * 3, i, "pt"};

		pts[i % 8] = pt;
		sum += f(i, &pt);
		if (slow) {
			struct timespec ts = {0, 1000000};

			nanosleep(&ts, NULL);
		}
	}
	return sum;
}

static void *thread(void *arg)
{
	return (void *)run((int)(long)arg);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	long sum = 0;

	if (argc > 1 && !strcmp(argv[1], "spin")) {
		/* Attached to: f for ever, a few thousand calls a second. */
		slow = 1;
		printf("ready\n");
		fflush(stdout);
		for (;;)
			run(100);
	}
	if (argc > 2 && !strcmp(argv[1], "slow")) {
		slow = 1;
		n = atoi(argv[2]);
		printf("ready\n");
		fflush(stdout);
	}
	if (argc > 3 && !strcmp(argv[1], "threads")) {
		int t = atoi(argv[2]);
		pthread_t tids[16];

		n = atoi(argv[3]);
		for (int k = 0; k < t && k < 16; k++)
			pthread_create(&tids[k], NULL, thread, (void *)(long)n);
		for (int k = 0; k < t && k < 16; k++) {
			void *r;

			pthread_join(tids[k], &r);
			sum += (long)r;
		}
	} else {
		sum = run(n);
	}
	printf("sum %ld counter %d\n", sum, g_counter);
	return 0;
}
