/* bench/trace, tracepad's side: the loop of loop.h recording through tracepad's in-process
 * producer into shared-memory rings, drained concurrently by a consumer thread as the tracer
 * would, into a CTF trace that our reader then counts.
 *   bench-trace-tracepad [--clock monotonic|tsc] THREADS EVENTS DIR
 *   bench-trace-tracepad --clock-best   (prints the clock tp_trace_clock_best() picks)
 * The producer maps its rings populated (as LTTng-UST 2.13 maps its buffers), so the loop
 * pays no page faults. */
#include "loop.h"
#include "trace/trace.h"

#include <stdatomic.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

/* The consumer copies full packets while the producers run; 1 ms between empty polls keeps
 * it well ahead of the rings (each holds a whole run anyway, see main). */
#define POLL_NS 1000000

static struct tp_trace_shm shm;
static struct tp_trace_consumer *consumer;
static atomic_bool stop;
static int consumer_err;

static int thread_init(struct loop_thread *t)
{
	struct tp_trace_producer *p = calloc(1, sizeof(*p));

	if (!p)
		return -1;
	t->ctx = p;
	return tp_trace_shm_producer_init(&shm, p);
}

static uint64_t record(struct loop_thread *t, uint64_t first, uint64_t n)
{
	struct tp_trace_producer *p = t->ctx;
	uint64_t taken = 0;

	for (uint64_t i = first; i < first + n; i++) {
		uint8_t *e = tp_trace_reserve(p, 0, 32);

		if (!e)
			continue;
		e = tp_trace_put_u64(e, LOOP_A(i));
		e = tp_trace_put_u64(e, LOOP_B(i));
		e = tp_trace_put_u64(e, LOOP_C(i));
		tp_trace_put_u64(e, LOOP_D(i));
		tp_trace_commit(p);
		taken++;
	}
	return taken;
}

static uint64_t discarded;

static void thread_fini(struct loop_thread *t)
{
	struct tp_trace_producer *p = t->ctx;

	__atomic_fetch_add(&discarded, p->discarded, __ATOMIC_RELAXED);
	tp_trace_producer_fini(p);
	free(p);
}

static void *consume(void *arg)
{
	const struct timespec pause = {0, POLL_NS};

	for (;;) {
		bool last = atomic_load(&stop);
		int n = tp_trace_consumer_poll(consumer);

		if (n < 0) {
			consumer_err = n;
			return NULL;
		}
		if (last)
			return NULL;
		if (!n)
			nanosleep(&pause, NULL);
	}
}

/* Events in the trace, through our reader; -errno if it cannot be read. */
static int64_t count_written(const char *dir, uint64_t *lost)
{
	struct tp_trace_reader *r;
	const struct tp_trace_event *ev;
	int64_t n = 0;
	int err = tp_trace_reader_open(dir, &r);

	if (err)
		return err;
	while ((err = tp_trace_reader_next(r, &ev)) > 0)
		n++;
	*lost = tp_trace_reader_discarded(r);
	tp_trace_reader_close(r);
	return err < 0 ? err : n;
}

static int usage(void)
{
	fprintf(stderr, "usage: bench-trace-tracepad [--clock monotonic|tsc] THREADS "
			"EVENTS DIR\n"
			"       bench-trace-tracepad --clock-best\n");
	return 2;
}

int main(int argc, char **argv)
{
	static const struct tp_trace_field_desc f[] = {{"a", TP_TRACE_INT, 64, false, 10, 0},
						       {"b", TP_TRACE_INT, 64, false, 10, 0},
						       {"c", TP_TRACE_INT, 64, false, 10, 0},
						       {"d", TP_TRACE_INT, 64, false, 10, 0}};
	struct tp_trace_opts o = {.clock = TP_TRACE_CLOCK_MONOTONIC};
	struct tp_trace_ring_opts ro = {0};
	struct loop l = {.thread_init = thread_init, .loop = record, .thread_fini = thread_fini};
	struct tp_trace_writer *w;
	pthread_t cth;
	uint64_t per_ring, lost = 0;
	int64_t written;
	int err;

	argv++, argc--;
	if (argc == 1 && !strcmp(argv[0], "--clock-best")) {
		puts(tp_trace_clock_best() == TP_TRACE_CLOCK_TSC ? "tsc" : "monotonic");
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[0], "--clock")) {
		if (!strcmp(argv[1], "tsc"))
			o.clock = TP_TRACE_CLOCK_TSC;
		else if (strcmp(argv[1], "monotonic"))
			return usage();
		argv += 2, argc -= 2;
	}
	if (argc != 3 || loop_args(&l, argc, argv))
		return usage();

	/* Each ring holds a whole run, so that a consumer falling behind (two producers on two
	 * CPUs leave it no CPU of its own) never makes a producer discard: the figure is the
	 * cost of recording every event. */
	per_ring = (l.events + l.warmup) * (TP_TRACE_EVENT_HDR + 32);
	ro.nr_rings = l.threads;
	ro.nr_subbufs = (uint32_t)(per_ring / TP_TRACE_DEFAULT_PACKET + 4);
	err = tp_trace_writer_new(argv[2], &o, &w);
	if (!err && (err = tp_trace_writer_add_class(w, "bench", f, 4)) > 0)
		err = 0;
	if (!err)
		err = tp_trace_writer_sync(w);
	if (!err)
		err = tp_trace_consumer_new(w, &ro, &consumer);
	if (!err)
		err = tp_trace_shm_attach(&shm, tp_trace_consumer_fd(consumer));
	if (err) {
		fprintf(stderr, "bench-trace-tracepad: setting up %s: %s\n", argv[2],
			strerror(-err));
		return 1;
	}
	if (pthread_create(&cth, NULL, consume, NULL))
		return 1;
	printf("tracer tracepad clock %s rings %u x %u x %u bytes\n",
	       o.clock == TP_TRACE_CLOCK_TSC ? "tsc" : "monotonic", ro.nr_rings, ro.nr_subbufs,
	       TP_TRACE_DEFAULT_PACKET);
	err = loop_run(&l);
	atomic_store(&stop, true);
	pthread_join(cth, NULL);
	if (!err && !consumer_err) {
		int n = tp_trace_consumer_flush(consumer);

		if (n < 0)
			consumer_err = n;
	}
	tp_trace_shm_detach(&shm);
	tp_trace_consumer_free(consumer);
	if (tp_trace_writer_close(w) || consumer_err || err) {
		fprintf(stderr, "bench-trace-tracepad: recording failed\n");
		return 1;
	}
	printf("discarded %llu\n", (unsigned long long)discarded);
	written = count_written(argv[2], &lost);
	if (written < 0) {
		fprintf(stderr, "bench-trace-tracepad: reading %s: %s\n", argv[2],
			strerror((int)-written));
		return 1;
	}
	printf("written %lld discarded-in-trace %llu\n", (long long)written,
	       (unsigned long long)lost);
	return 0;
}
