/* calls-order's target: 4 threads malloc and free blocks of sizes no one else asks for
 * (7000 + 0..63), each call and the taking of a sequence number under one lock, so that
 * the sequence numbers are the order of the calls' returns.  At the end it prints its log,
 * one line a call: "TID malloc SIZE PTR SEQ" or "TID free PTR SEQ".
 * With the argument "own", the threads call the program's own order_op(k, i) instead
 * (not libc's: a selection the agent engine takes), logged as "TID op TOKEN SEQ" with the
 * token it returned, k * 100000 + i. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NTHREADS 4
#define ROUNDS 600
#define LIVE 8

struct ev {
	int is_free;
	size_t size;
	void *p;
	unsigned seq;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t start; /* "own": the threads' calls interleave from the first */
static unsigned next_seq;
static int running = NTHREADS; /* "own": threads still calling */
static struct ev log_[NTHREADS][2 * ROUNDS];
static pid_t tids[NTHREADS];
static int nlog[NTHREADS];

/* The function the agent hooks: a real call that no other code makes, long enough for a
 * jump pad. */
__attribute__((noinline, noipa, used)) long order_op(int k, int i)
{
	return (long)k * 100000 + i;
}

static void *run_own(void *arg)
{
	int k = (int)(intptr_t)arg;

	tids[k] = (pid_t)syscall(SYS_gettid);
	pthread_barrier_wait(&start);
	for (int i = 0; i < 2 * ROUNDS; i++) {
		struct ev *e = &log_[k][i];

		pthread_mutex_lock(&lock);
		e->p = (void *)order_op(k, i);
		e->seq = next_seq++;
		pthread_mutex_unlock(&lock);
		/* no two calls in a row from one thread while another runs: every return is
		 * next to another thread's */
		while (__atomic_load_n(&next_seq, __ATOMIC_ACQUIRE) == e->seq + 1 &&
		       __atomic_load_n(&running, __ATOMIC_ACQUIRE) > 1)
			sched_yield();
	}
	__atomic_sub_fetch(&running, 1, __ATOMIC_RELEASE);
	nlog[k] = 2 * ROUNDS;
	return NULL;
}

static void *run(void *arg)
{
	int k = (int)(intptr_t)arg, n = 0;
	void *live[LIVE] = {0};

	tids[k] = (pid_t)syscall(SYS_gettid);
	for (int i = 0; i < ROUNDS; i++) {
		int slot = i % LIVE;
		struct ev *e;

		if (live[slot]) {
			void *p = live[slot]; /* logged as the address it was, after the free */

			pthread_mutex_lock(&lock);
			e = &log_[k][n++];
			*e = (struct ev){1, 0, p, 0};
			free(p);
			e->seq = next_seq++;
			pthread_mutex_unlock(&lock);
		}
		pthread_mutex_lock(&lock);
		e = &log_[k][n++];
		e->size = 7000 + (size_t)((i * 7 + k) % 64);
		e->p = malloc(e->size);
		e->is_free = 0;
		e->seq = next_seq++;
		pthread_mutex_unlock(&lock);
		live[slot] = e->p;
	}
	for (int slot = 0; slot < LIVE; slot++) {
		pthread_mutex_lock(&lock);
		log_[k][n] = (struct ev){1, 0, live[slot], 0};
		free(live[slot]);
		log_[k][n++].seq = next_seq++;
		pthread_mutex_unlock(&lock);
	}
	nlog[k] = n;
	return NULL;
}

int main(int argc, char **argv)
{
	int own = argc > 1 && !strcmp(argv[1], "own");
	pthread_t th[NTHREADS];

	pthread_barrier_init(&start, NULL, NTHREADS);
	for (int k = 0; k < NTHREADS; k++)
		if (pthread_create(&th[k], NULL, own ? run_own : run, (void *)(intptr_t)k))
			return 1;
	for (int k = 0; k < NTHREADS; k++)
		pthread_join(th[k], NULL);
	for (int k = 0; k < NTHREADS; k++)
		for (int i = 0; i < nlog[k]; i++) {
			struct ev *e = &log_[k][i];

			if (own)
				printf("%d op %ld %u\n", tids[k], (long)(intptr_t)e->p, e->seq);
			else if (e->is_free)
				printf("%d free %p %u\n", tids[k], e->p, e->seq);
			else
				printf("%d malloc %zu %p %u\n", tids[k], e->size, e->p, e->seq);
		}
	return 0;
}
