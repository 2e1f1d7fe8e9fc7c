/* Producer cost: ns per event with a 32-byte payload (50-byte record), one thread and two
 * threads each on its own shared-memory ring, for both clocks, and for the tracer-side
 * writer.  Not a test: it prints medians, and the rings hold a whole run so that only the
 * producer is measured (the consumer drains between runs).
 *   bench-producer [EVENTS_PER_RUN]   (default 1000000) */
#include "trace/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUNS 7

static uint64_t now(void)
{
	return tp_trace_clock_now(TP_TRACE_CLOCK_MONOTONIC);
}

struct job {
	struct tp_trace_shm *shm;
	struct tp_trace_producer *prod; /* writer backend when set */
	uint64_t events;
	pthread_barrier_t *go;
	uint64_t t0, t1, lost;
};

static void *produce(void *arg)
{
	struct job *j = arg;
	struct tp_trace_producer own, *p = j->prod ? j->prod : &own;

	if (!j->prod && tp_trace_shm_producer_init(j->shm, &own)) {
		fprintf(stderr, "no ring\n");
		exit(1);
	}
	pthread_barrier_wait(j->go);
	j->t0 = now();
	for (uint64_t i = 0; i < j->events; i++) {
		uint8_t *e = tp_trace_reserve(p, 0, 32);

		if (!e)
			continue;
		e = tp_trace_put_u64(e, i);
		e = tp_trace_put_u64(e, i * 3);
		e = tp_trace_put_u64(e, 0x1234);
		tp_trace_put_u64(e, ~i);
		tp_trace_commit(p);
	}
	j->t1 = now();
	j->lost = p->discarded;
	if (!j->prod)
		tp_trace_producer_fini(&own);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median ns per event per thread over RUNS runs (after one warm-up run). */
static double run(struct tp_trace_shm *shm, struct tp_trace_consumer *c,
		  struct tp_trace_producer *prod, int threads, uint64_t events)
{
	double ns[RUNS];

	for (int r = -1; r < RUNS; r++) {
		struct job jobs[2];
		pthread_t th[2];
		pthread_barrier_t go;
		double sum = 0;

		pthread_barrier_init(&go, NULL, (unsigned)threads);
		for (int t = 0; t < threads; t++) {
			jobs[t] =
			    (struct job){.shm = shm, .prod = prod, .events = events, .go = &go};
			pthread_create(&th[t], NULL, produce, &jobs[t]);
		}
		for (int t = 0; t < threads; t++) {
			pthread_join(th[t], NULL);
			sum += (double)(jobs[t].t1 - jobs[t].t0) / (double)events;
			if (jobs[t].lost)
				fprintf(stderr, "warning: %lu events discarded\n",
					(unsigned long)jobs[t].lost);
		}
		pthread_barrier_destroy(&go);
		if (c)
			tp_trace_consumer_poll(c);
		if (r >= 0)
			ns[r] = sum / threads;
	}
	qsort(ns, RUNS, sizeof(ns[0]), cmp);
	return ns[RUNS / 2];
}

static double clock_cost(enum tp_trace_clock clock)
{
	uint64_t t0 = now(), sink = 0;

	for (int i = 0; i < 10000000; i++)
		sink += tp_trace_clock_now(clock);
	__asm__ volatile("" ::"r"(sink));
	return (double)(now() - t0) / 1e7;
}

int main(int argc, char **argv)
{
	uint64_t events = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
	char tmpl[] = "/tmp/tp-bench-XXXXXX", dir[64];
	static const struct tp_trace_field_desc f[] = {{"a", TP_TRACE_INT, 64, false, 10, 0},
						       {"b", TP_TRACE_INT, 64, false, 10, 0},
						       {"c", TP_TRACE_INT, 64, false, 10, 0},
						       {"d", TP_TRACE_INT, 64, false, 10, 0}};

	if (!mkdtemp(tmpl))
		return 1;
	printf("clock read: monotonic (vDSO) %.1f ns, rdtsc %.1f ns\n",
	       clock_cost(TP_TRACE_CLOCK_MONOTONIC), clock_cost(TP_TRACE_CLOCK_TSC));
	for (int clk = 0; clk < 2; clk++) {
		struct tp_trace_opts o = {.clock = (enum tp_trace_clock)clk};
		struct tp_trace_ring_opts ro = {.nr_rings = 2};
		struct tp_trace_writer *w;
		struct tp_trace_consumer *c;
		struct tp_trace_producer wp;
		struct tp_trace_shm shm;
		const char *name = clk ? "tsc" : "monotonic";

		snprintf(dir, sizeof(dir), "%s/%s", tmpl, name);
		if (tp_trace_writer_new(dir, &o, &w) || tp_trace_writer_add_class(w, "b", f, 4) < 0)
			return 1;
		ro.nr_subbufs = (uint32_t)((events * (TP_TRACE_EVENT_HDR + 32)) / 65536 + 4);
		if (tp_trace_consumer_new(w, &ro, &c) ||
		    tp_trace_shm_attach(&shm, tp_trace_consumer_fd(c)))
			return 1;
		printf("shm ring, %-9s 1 thread : %5.1f ns/event\n", name,
		       run(&shm, c, NULL, 1, events));
		printf("shm ring, %-9s 2 threads: %5.1f ns/event per thread\n", name,
		       run(&shm, c, NULL, 2, events));
		tp_trace_writer_producer_init(w, &wp);
		printf("writer,   %-9s 1 thread : %5.1f ns/event (packets written to %s)\n", name,
		       run(NULL, NULL, &wp, 1, events), tmpl);
		tp_trace_producer_fini(&wp);
		tp_trace_consumer_flush(c);
		tp_trace_shm_detach(&shm);
		tp_trace_consumer_free(c);
		tp_trace_writer_close(w);
		snprintf(dir, sizeof(dir), "rm -rf '%s/%s'", tmpl, name);
		if (system(dir))
			return 1;
	}
	rmdir(tmpl);
	return 0;
}
