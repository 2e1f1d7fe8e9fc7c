/* calls-order's target: 4 threads malloc and free blocks of sizes no one else asks for
 * (7000 + 0..63), each call and the taking of a sequence number under one lock, so that
 * the sequence numbers are the order of the calls' returns.  At the end it prints its log,
 * one line a call: "TID malloc SIZE PTR SEQ" or "TID free PTR SEQ". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
static unsigned next_seq;
static struct ev log_[NTHREADS][2 * ROUNDS];
static pid_t tids[NTHREADS];
static int nlog[NTHREADS];

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

int main(void)
{
	pthread_t th[NTHREADS];

	for (int k = 0; k < NTHREADS; k++)
		if (pthread_create(&th[k], NULL, run, (void *)(intptr_t)k))
			return 1;
	for (int k = 0; k < NTHREADS; k++)
		pthread_join(th[k], NULL);
	for (int k = 0; k < NTHREADS; k++)
		for (int i = 0; i < nlog[k]; i++) {
			struct ev *e = &log_[k][i];

			if (e->is_free)
				printf("%d free %p %u\n", tids[k], e->p, e->seq);
			else
				printf("%d malloc %zu %p %u\n", tids[k], e->size, e->p, e->seq);
		}
	return 0;
}
