/* e2e target of kill9.py (tracepad killed with SIGKILL while it traces): prints "pid N", then
 * 4 threads work, checking their own results all along: one recomputes a hash and compares it
 * with the one computed at start, one sums by recursion (frames in flight when tracepad dies),
 * one allocates and frees, one sleeps and signals itself (its SIGUSR1 handler calls a function
 * too).  With ROUNDS, each thread does ROUNDS rounds; without, they work until a line (or EOF)
 * comes on stdin and each has done a round.  At the end it prints what it checked and exits
 * 0 only if every check held.
 * Usage: kill9 [ROUNDS] */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NTHREADS 4
#define HASH_ROUNDS 200
#define DEPTH 20

static volatile int stop;
static long rounds; /* 0: until stdin says */
static unsigned long reference, bad[NTHREADS], done[NTHREADS];
static volatile sig_atomic_t handled;
static unsigned long sent;

__attribute__((noinline)) unsigned long k9_hash(unsigned long seed)
{
	unsigned long x = seed, acc = 0;

	for (int i = 0; i < HASH_ROUNDS; i++) {
		x = x * 6364136223846793005ul + 1442695040888963407ul;
		acc ^= x >> (i & 31);
	}
	return acc;
}

__attribute__((noinline)) unsigned long k9_rsum(unsigned long n)
{
	unsigned long r = n ? n + k9_rsum(n - 1) : 0;

	__asm__ volatile("" : "+r"(r));
	return r;
}

__attribute__((noinline)) int k9_note(int sig)
{
	return sig == SIGUSR1;
}

static void on_usr1(int sig)
{
	if (k9_note(sig))
		handled++;
}

static int more(long id)
{
	if (rounds)
		return (long)done[id] < rounds;
	return !__atomic_load_n(&stop, __ATOMIC_RELAXED);
}

static void *worker(void *arg)
{
	long id = (long)arg;

	while (more(id)) {
		if (id == 0) {
			if (k9_hash(42) != reference)
				bad[id]++;
		} else if (id == 1) {
			unsigned long n = DEPTH - done[id] % 4;

			if (k9_rsum(n) != n * (n + 1) / 2)
				bad[id]++;
		} else if (id == 2) {
			size_t n = 16 + (done[id] % 16) * 16;
			unsigned char *p = malloc(n);

			if (!p) {
				bad[id]++;
				continue;
			}
			memset(p, (int)(done[id] & 0xff), n);
			for (size_t i = 0; i < n; i++)
				if (p[i] != (unsigned char)(done[id] & 0xff))
					bad[id]++;
			free(p);
		} else {
			struct timespec ts = {0, 1000000};
			sig_atomic_t before = handled;

			nanosleep(&ts, NULL);
			sent++;
			pthread_kill(pthread_self(), SIGUSR1);
			if (handled != before + 1)
				bad[id]++;
		}
		__atomic_fetch_add(&done[id], 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = on_usr1};
	pthread_t tids[NTHREADS];
	unsigned long total_bad = 0;
	char line[64];

	rounds = argc > 1 ? atol(argv[1]) : 0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	reference = k9_hash(42);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	for (long i = 0; i < NTHREADS; i++)
		if (pthread_create(&tids[i], NULL, worker, (void *)i)) {
			fprintf(stderr, "kill9: pthread_create failed\n");
			return 1;
		}
	if (!rounds && !fgets(line, sizeof(line), stdin))
		line[0] = 0;
	/* Each thread works once before the stop: one that was stepped by a tracer until just
	 * now may not have begun, which is no failure; one that never works (60 s) is. */
	for (int k = 0; k < 6000 && !rounds; k++) {
		int all = 1;

		for (int i = 0; i < NTHREADS; i++)
			all &= __atomic_load_n(&done[i], __ATOMIC_RELAXED) > 0;
		if (all)
			break;
		usleep(10000);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(tids[i], NULL);
	for (int i = 0; i < NTHREADS; i++) {
		total_bad += bad[i];
		if (!done[i])
			total_bad++;
	}
	if (handled != (sig_atomic_t)sent)
		total_bad++;
	if (rounds)
		printf("%s: %ld rounds each, %lu signals handled of %lu, %lu bad\n",
		       total_bad ? "FAIL" : "ok", rounds, (unsigned long)handled, sent, total_bad);
	else
		printf("%s: %lu %lu %lu %lu rounds, %lu signals handled of %lu, %lu bad\n",
		       total_bad ? "FAIL" : "ok", done[0], done[1], done[2], done[3],
		       (unsigned long)handled, sent, total_bad);
	return total_bad ? 1 : 0;
}
