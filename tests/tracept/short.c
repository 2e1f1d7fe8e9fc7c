/* Driver of short.S: "addrs" prints the traced addresses; "N" calls shorts(i) and
 * redzone(i) for i < N in T threads (argv[2], default 1) and prints what they returned;
 * "spin" does it for ever, aborting at the first wrong result; "segv" and "crash" fault. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long shorts(long n);
long redzone(long x);
extern const unsigned long short_addrs[];

static long n;
static int spin;

static void *run(void *arg)
{
	long bad = 0, sum = 0;

	(void)arg;
	for (long i = 0; i < n || spin; i++) {
		if (spin &&
		    (shorts(i % 16) != (i % 16) * (i % 16 + 1) / 2 || redzone(i) != 16 * i + 120))
			abort(); /* a tracepoint changed what the code computes */
		if (spin)
			continue;
		bad += shorts(i % 16) != (i % 16) * (i % 16 + 1) / 2;
		bad += redzone(i) != 16 * i + 120;
		sum += redzone(i);
	}
	printf("sum %ld bad %ld\n", sum, bad);
	return (void *)bad;
}

static sigjmp_buf back;
static int *volatile unmapped = (int *)16;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)si, (void)uc;
	siglongjmp(back, 1);
}

/* "segv N": N faults of its own caught by its handler, between traced calls; "crash": a
 * fault with the default action (the program dies of SIGSEGV as without tracepad). */
static int faults(int n, int crash)
{
	struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO};
	volatile int caught = 0;
	volatile long sum = 0;

	if (!crash)
		sigaction(SIGSEGV, &sa, NULL);
	for (volatile int i = 0; i < n; i++) {
		sum += redzone(i);
		if (sigsetjmp(back, 1) == 0)
			sum += *(volatile int *)unmapped;
		else
			caught++;
	}
	printf("segv %d caught %d sum %ld\n", n, caught, sum);
	return 0;
}

int main(int argc, char **argv)
{
	int t = argc > 2 ? atoi(argv[2]) : 1;
	pthread_t th[16];
	long bad = 0;

	if (argc > 1 && !strcmp(argv[1], "addrs")) {
		for (int i = 0; short_addrs[i]; i++)
			printf("0x%lx\n", short_addrs[i]);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "spin")) {
		/* attached to: T threads for ever, aborting on a wrong result */
		spin = 1;
		printf("ready\n");
		fflush(stdout);
	}
	if (argc > 2 && !strcmp(argv[1], "many")) {
		/* T threads one after the other (more than the agent has rings), 10 calls each */
		n = 10;
		for (int k = 0; k < atoi(argv[2]); k++) {
			void *r;

			pthread_create(&th[0], NULL, run, NULL);
			pthread_join(th[0], &r);
			bad += (long)r;
		}
		return bad != 0;
	}
	if (argc > 2 && !strcmp(argv[1], "segv"))
		return faults(atoi(argv[2]), 0);
	if (argc > 2 && !strcmp(argv[1], "crash"))
		return faults(atoi(argv[2]), 1);
	n = argc > 1 ? atol(argv[1]) : 100;
	for (int k = 0; k < t && k < 16; k++)
		pthread_create(&th[k], NULL, run, NULL);
	for (int k = 0; k < t && k < 16; k++) {
		void *r;

		pthread_join(th[k], &r);
		bad += (long)r;
	}
	return bad != 0;
}
