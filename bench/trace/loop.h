/* Shared by the programs of bench/trace, one per tracer, so that both time the same loop: T
 * threads, each records a warm-up then N events of 32 bytes of payload (4 x uint64), timed
 * with clock_gettime(CLOCK_MONOTONIC) around the N; and the lines that trace.py parses. */
#ifndef TP_BENCH_TRACE_LOOP_H
#define TP_BENCH_TRACE_LOOP_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LOOP_MAX_THREADS 64

/* The payload of event i, the same for every tracer. */
#define LOOP_A(i) ((uint64_t)(i))
#define LOOP_B(i) ((uint64_t)(i)*3)
#define LOOP_C(i) ((uint64_t)0x1234)
#define LOOP_D(i) (~(uint64_t)(i))

struct loop_thread {
	struct loop *l;
	unsigned int idx;
	pthread_t th;
	void *ctx; /* the tracer's per-thread state */
	uint64_t t0, t1, produced;
	int err;
};

struct loop {
	unsigned int threads;
	uint64_t events, warmup;
	pthread_barrier_t go;
	/* Per tracer.  loop records events first..first + n - 1 and returns how many the tracer
	 * took (a tracer that may discard says so); it is called once per phase, never per
	 * event, so that each program's loop body is inlined. */
	int (*thread_init)(struct loop_thread *t);
	uint64_t (*loop)(struct loop_thread *t, uint64_t first, uint64_t n);
	void (*thread_fini)(struct loop_thread *t);
	struct loop_thread t[LOOP_MAX_THREADS];
};

static inline uint64_t loop_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* THREADS EVENTS from argv[0], argv[1]; the warm-up is a tenth of the events: it faults in
 * the buffers and lets each tracer set up its per-thread state outside the timed loop. */
static inline int loop_args(struct loop *l, int argc, char **argv)
{
	char *end;

	if (argc < 2)
		return -1;
	l->threads = (unsigned int)strtoul(argv[0], &end, 0);
	if (*end || !l->threads || l->threads > LOOP_MAX_THREADS)
		return -1;
	l->events = strtoull(argv[1], &end, 0);
	if (*end || !l->events)
		return -1;
	l->warmup = l->events / 10;
	return 0;
}

static void *loop_thread_main(void *arg)
{
	struct loop_thread *t = arg;
	struct loop *l = t->l;

	t->err = l->thread_init ? l->thread_init(t) : 0;
	if (!t->err)
		t->produced = l->loop(t, 0, l->warmup);
	/* Every thread starts its timed loop at the same time, so that they really compete. */
	pthread_barrier_wait(&l->go);
	if (t->err)
		return NULL;
	t->t0 = loop_now();
	t->produced += l->loop(t, l->warmup, l->events);
	t->t1 = loop_now();
	if (l->thread_fini)
		l->thread_fini(t);
	return NULL;
}

/* Runs the threads and prints one line per thread, their mean and the events produced.
 * Returns 0, or -1 when a thread could not start tracing. */
static inline int loop_run(struct loop *l)
{
	uint64_t produced = 0;
	double sum = 0;
	int err = 0;

	printf("threads %u events %llu warmup %llu\n", l->threads, (unsigned long long)l->events,
	       (unsigned long long)l->warmup);
	pthread_barrier_init(&l->go, NULL, l->threads);
	for (unsigned int i = 0; i < l->threads; i++) {
		l->t[i].l = l;
		l->t[i].idx = i;
		if (pthread_create(&l->t[i].th, NULL, loop_thread_main, &l->t[i])) {
			fprintf(stderr, "pthread_create failed\n");
			exit(1);
		}
	}
	for (unsigned int i = 0; i < l->threads; i++) {
		struct loop_thread *t = &l->t[i];
		double ns;

		pthread_join(t->th, NULL);
		if (t->err) {
			fprintf(stderr, "thread %u: cannot trace (%d)\n", i, t->err);
			err = -1;
			continue;
		}
		ns = (double)(t->t1 - t->t0) / (double)l->events;
		printf("thread %u ns/event %.2f\n", i, ns);
		sum += ns;
		produced += t->produced;
	}
	pthread_barrier_destroy(&l->go);
	if (err)
		return err;
	printf("ns/event %.2f\n", sum / l->threads);
	printf("produced %llu\n", (unsigned long long)produced);
	return 0;
}

#endif
