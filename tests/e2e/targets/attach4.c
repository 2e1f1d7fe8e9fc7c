/* e2e target for `count --engine trapflag -p`: 4 threads work, and once each has done a round
 * it prints "pid N"; they go on until a line (or EOF) comes on stdin, checking their own
 * results all along: two recompute a deterministic hash and compare it with the one computed before
 * anyone attached, one allocates and frees (malloc's locks), one sleeps and signals itself (SIGUSR1
 * handler, counted).  At the end it prints what it checked and exits 0 only if every check held.
 * Usage: attach4 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NTHREADS 4
#define HASH_ROUNDS 200

static volatile int stop;
static unsigned long reference, bad[NTHREADS];
/* read by the test through /proc/PID/mem: each thread's progress */
unsigned long attach4_rounds[NTHREADS];
static volatile sig_atomic_t handled;
static unsigned long sent;

__attribute__((noinline)) static unsigned long hash(unsigned long seed)
{
	unsigned long x = seed, acc = 0;

	for (int i = 0; i < HASH_ROUNDS; i++) {
		x = x * 6364136223846793005ul + 1442695040888963407ul;
		acc ^= x >> (i & 31);
	}
	return acc;
}

static void on_usr1(int sig)
{
	(void)sig;
	handled++;
}

static void *worker(void *arg)
{
	long id = (long)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		if (id < 2) {
			if (hash(42) != reference)
				bad[id]++;
		} else if (id == 2) {
			size_t n = 16 + (attach4_rounds[id] % 16) * 16;
			unsigned char *p = malloc(n);

			if (!p) {
				bad[id]++;
				continue;
			}
			memset(p, (int)(attach4_rounds[id] & 0xff), n);
			for (size_t i = 0; i < n; i++)
				if (p[i] != (unsigned char)(attach4_rounds[id] & 0xff))
					bad[id]++;
			free(p);
		} else {
			struct timespec ts = {0, 2000000};
			sig_atomic_t before = handled;

			nanosleep(&ts, NULL);
			sent++;
			pthread_kill(pthread_self(), SIGUSR1);
			if (handled != before + 1)
				bad[id]++;
		}
		attach4_rounds[id]++;
	}
	return NULL;
}

int main(void)
{
	struct sigaction sa = {.sa_handler = on_usr1};
	pthread_t tids[NTHREADS];
	unsigned long total_bad = 0;
	char line[64];

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	reference = hash(42);
	for (long i = 0; i < NTHREADS; i++)
		if (pthread_create(&tids[i], NULL, worker, (void *)i)) {
			fprintf(stderr, "attach4: pthread_create failed\n");
			return 1;
		}
	/* Every thread has done a round (thread 2 its first malloc, which maps its arena)
	 * before anyone reads this process's mappings. */
	for (int i = 0; i < NTHREADS; i++)
		while (!__atomic_load_n(&attach4_rounds[i], __ATOMIC_RELAXED))
			nanosleep(&(struct timespec){0, 1000000}, NULL);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		line[0] = 0;
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(tids[i], NULL);
	for (int i = 0; i < NTHREADS; i++) {
		total_bad += bad[i];
		if (!attach4_rounds[i])
			total_bad++;
	}
	if (handled != (sig_atomic_t)sent)
		total_bad++;
	printf("%s: %lu %lu %lu %lu rounds, %lu signals handled of %lu, %lu bad\n",
	       total_bad ? "FAIL" : "ok", attach4_rounds[0], attach4_rounds[1], attach4_rounds[2],
	       attach4_rounds[3], (unsigned long)handled, sent, total_bad);
	return total_bad ? 1 : 0;
}
