/* Test helper: writes traces for test-trace-bt2.py and prints one JSON line saying what was
 * produced, so that the test can hold babeltrace2 and our reader to exact counts.
 *   trace-gen types DIR [EVENTS]                every field type, tracer-side producers
 *   trace-gen shm DIR THREADS EVENTS [SUBBUFS [no_loss]]  threads into shared-memory rings
 *   trace-gen crash DIR THREADS EVENTS [no_loss] a child commits EVENTS, is SIGKILLed
 *   trace-gen kill DIR THREADS MS               a child producing flat out is SIGKILLed
 *   trace-gen discard DIR EVENTS                a small ring nobody drains */
#include "trace/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what, int err)
{
	fprintf(stderr, "trace-gen: %s: %s\n", what, strerror(-err));
	exit(1);
}

static const struct tp_trace_field_desc all_types[] = {
    {"u8", TP_TRACE_INT, 8, false, 10, 0},	{"s8", TP_TRACE_INT, 8, true, 10, 0},
    {"u16", TP_TRACE_INT, 16, false, 10, 0},	{"s16", TP_TRACE_INT, 16, true, 10, 0},
    {"u32", TP_TRACE_INT, 32, false, 10, 0},	{"s32", TP_TRACE_INT, 32, true, 10, 0},
    {"u64", TP_TRACE_INT, 64, false, 10, 0},	{"s64", TP_TRACE_INT, 64, true, 10, 0},
    {"x32", TP_TRACE_INT, 32, false, 16, 0},	{"x64", TP_TRACE_INT, 64, false, 16, 0},
    {"name", TP_TRACE_STRING, 0, false, 0, 0},	{"data", TP_TRACE_BYTES, 0, false, 0, 0},
    {"regs", TP_TRACE_ARRAY, 64, false, 16, 4}, {"vals", TP_TRACE_SEQ, 32, true, 10, 0},
    {"small", TP_TRACE_ARRAY, 16, true, 10, 2},
};

/* Event i of producer k of the "types" trace; test-trace-bt2.py recomputes these. */
static void put_types(struct tp_trace_producer *p, int id, uint32_t k, uint32_t i)
{
	char name[32];
	uint8_t data[8], *e;
	uint32_t nlen = (uint32_t)snprintf(name, sizeof(name), "ev-%u-%u", k, i);
	uint32_t dlen = i % 5, nvals = i % 4, size;

	for (uint32_t j = 0; j < dlen; j++)
		data[j] = (uint8_t)(i + j * 61);
	size = 1 + 1 + 2 + 2 + 4 + 4 + 8 + 8 + 4 + 8 + nlen + 1 + 4 + dlen + 32 + 4 + 4 * nvals + 4;
	e = tp_trace_reserve_at(p, (uint16_t)id, size, tp_trace_clock_now(p->clock),
				(int32_t)(1000 + k), (int32_t)(2000 + k * 10 + i % 3));
	if (!e)
		die("reserve", -ENOSPC);
	e = tp_trace_put_u8(e, (uint8_t)i);
	e = tp_trace_put_u8(e, (uint8_t)(int8_t) - (int)(i % 128));
	e = tp_trace_put_u16(e, (uint16_t)(i * 7));
	e = tp_trace_put_u16(e, (uint16_t)(int16_t) - (int)(i % 30000));
	e = tp_trace_put_u32(e, i * 100003u);
	e = tp_trace_put_u32(e, (uint32_t)(-(int32_t)i * 1000));
	e = tp_trace_put_u64(e, (uint64_t)i * 0x100000001ull + 0xffffffff00000000ull);
	e = tp_trace_put_u64(e, (uint64_t)(-(int64_t)i * 1000000000000ll));
	e = tp_trace_put_u32(e, 0xdead0000u + i);
	e = tp_trace_put_u64(e, 0xfeedface00000000ull + i);
	e = tp_trace_put_str(e, name, nlen);
	e = tp_trace_put_bytes(e, data, dlen);
	for (uint64_t j = 0; j < 4; j++)
		e = tp_trace_put_u64(e, ((uint64_t)k << 32) + i * 4 + j);
	e = tp_trace_put_u32(e, nvals);
	for (uint32_t j = 0; j < nvals; j++)
		e = tp_trace_put_u32(e, (uint32_t)(-(int32_t)(j + 1) * (int32_t)i));
	e = tp_trace_put_u16(e, (uint16_t)(int16_t) - (int)i);
	tp_trace_put_u16(e, (uint16_t)i);
	tp_trace_commit(p);
}

static int gen_types(const char *dir, uint32_t events)
{
	struct tp_trace_opts o = {.packet_size = 4096};
	struct tp_trace_writer *w;
	struct tp_trace_producer p[2];
	int err, id, empty;

	err = tp_trace_writer_new(dir, &o, &w);
	if (err)
		die("writer", err);
	id = tp_trace_writer_add_class(w, "tp:types", all_types,
				       sizeof(all_types) / sizeof(all_types[0]));
	empty = tp_trace_writer_add_class(w, "tp:empty", NULL, 0);
	if (id < 0 || empty < 0)
		die("class", id < 0 ? id : empty);
	for (uint32_t k = 0; k < 2; k++)
		if ((err = tp_trace_writer_producer_init(w, &p[k])))
			die("producer", err);
	for (uint32_t i = 0; i < events; i++) {
		put_types(&p[i % 2], id, i % 2, i / 2);
		if (i % 1000 == 999) {
			if (!tp_trace_reserve(&p[0], (uint16_t)empty, 0))
				die("reserve", -ENOSPC);
			tp_trace_commit(&p[0]);
		}
	}
	for (int k = 0; k < 2; k++)
		if ((err = tp_trace_producer_fini(&p[k])))
			die("fini", err);
	if ((err = tp_trace_writer_close(w)))
		die("close", err);
	printf("{\"produced\":%u,\"discarded\":0,\"committed\":%u}\n", events + events / 1000,
	       events + events / 1000);
	return 0;
}

/* ---- shared memory ---- */

static const struct tp_trace_field_desc seq_fields[] = {
    {"thread", TP_TRACE_INT, 64, false, 10, 0},
    {"seq", TP_TRACE_INT, 64, false, 10, 0},
    {"a", TP_TRACE_INT, 64, false, 16, 0},
    {"b", TP_TRACE_INT, 64, true, 10, 0},
};

struct worker {
	struct tp_trace_shm *shm;
	uint32_t index;
	uint64_t events, committed, discarded;
	int id;
	int uncommitted; /* reserve and write one more event without committing it */
	pthread_barrier_t *done;
	uint64_t *progress; /* kill: events committed so far, stored after each commit */
};

/* A 32-byte payload, the event size of the benchmarks. */
static bool put_seq(struct tp_trace_producer *p, int id, uint64_t thread, uint64_t seq)
{
	uint8_t *e = tp_trace_reserve(p, (uint16_t)id, 32);

	if (!e)
		return false;
	e = tp_trace_put_u64(e, thread);
	e = tp_trace_put_u64(e, seq);
	e = tp_trace_put_u64(e, 0xabcd000000000000ull | seq);
	tp_trace_put_u64(e, -(int64_t)seq);
	tp_trace_commit(p);
	return true;
}

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct tp_trace_producer p;
	int err = tp_trace_shm_producer_init(wk->shm, &p);
	uint64_t base;

	if (err)
		die("claim", err);
	/* The ring's count is cumulative over its owners (a CTF stream's events_discarded): a
	 * worker that starts after another one finished may get that one's ring. */
	base = p.discarded;
	for (uint64_t i = 0; i < wk->events; i++) {
		put_seq(&p, wk->id, wk->index, i);
		if (wk->progress)
			__atomic_store_n(wk->progress, i + 1, __ATOMIC_RELAXED);
	}
	wk->committed = wk->events - (p.discarded - base);
	wk->discarded = p.discarded - base;
	if (wk->uncommitted) {
		uint8_t *e = tp_trace_reserve(&p, (uint16_t)wk->id, 32);

		if (e)
			memset(e, 0xee, 32);	    /* never committed: must not show up */
		wk->discarded = p.discarded - base; /* a reserve may be discarded too */
		pthread_barrier_wait(wk->done);
		pause();
	}
	tp_trace_producer_fini(&p);
	return NULL;
}

static struct tp_trace_writer *new_trace(const char *dir, uint32_t packet, int *id)
{
	struct tp_trace_opts o = {.packet_size = packet};
	struct tp_trace_writer *w;
	int err = tp_trace_writer_new(dir, &o, &w);

	if (err)
		die("writer", err);
	*id = tp_trace_writer_add_class(w, "tp:seq", seq_fields, 4);
	if (*id < 0)
		die("class", *id);
	if ((err = tp_trace_writer_sync(w)))
		die("sync", err);
	return w;
}

static int gen_shm(const char *dir, uint32_t threads, uint64_t events, uint32_t subbufs,
		   bool no_loss)
{
	struct tp_trace_ring_opts ro = {.nr_rings = threads, .nr_subbufs = subbufs};
	struct tp_trace_consumer *c;
	struct tp_trace_writer *w;
	struct tp_trace_shm shm;
	struct worker wk[64];
	pthread_t th[64];
	bool joined[64] = {false};
	uint64_t discarded = 0;
	int id, err, running;

	if (threads < 1 || threads > 64)
		die("threads", -EINVAL);
	ro.flags = no_loss ? TP_TRACE_NO_LOSS : 0;
	w = new_trace(dir, 0, &id);
	if ((err = tp_trace_consumer_new(w, &ro, &c)))
		die("consumer", err);
	if ((err = tp_trace_shm_attach(&shm, tp_trace_consumer_fd(c))))
		die("attach", err);
	for (uint32_t i = 0; i < threads; i++) {
		wk[i] = (struct worker){.shm = &shm, .index = i, .events = events, .id = id};
		pthread_create(&th[i], NULL, worker_main, &wk[i]);
	}
	/* Drain while they run, as the CLI's loop will. */
	do {
		running = 0;
		for (uint32_t i = 0; i < threads; i++) {
			if (!joined[i] && !pthread_tryjoin_np(th[i], NULL))
				joined[i] = true;
			running += !joined[i];
		}
		if ((err = tp_trace_consumer_poll(c)) < 0)
			die("poll", err);
		if (!err)
			usleep(200);
	} while (running);
	if ((err = tp_trace_consumer_flush(c)) < 0)
		die("flush", err);
	tp_trace_shm_detach(&shm);
	tp_trace_consumer_free(c);
	if ((err = tp_trace_writer_close(w)))
		die("close", err);
	for (uint32_t i = 0; i < threads; i++)
		discarded += wk[i].discarded;
	printf("{\"produced\":%" PRIu64 ",\"discarded\":%" PRIu64 ",\"committed\":%" PRIu64 "}\n",
	       events * threads, discarded, events * threads - discarded);
	return 0;
}

/* The child commits exactly @events events over @threads threads, leaves one more reserved
 * and half-written in each, tells the parent, and waits to be killed. */
static void crash_child(int fd, int wfd, uint32_t threads, uint64_t events, int id)
{
	struct tp_trace_shm shm;
	struct worker wk[64];
	pthread_t th[64];
	pthread_barrier_t done;
	uint64_t counts[2] = {0, 0};
	int err = tp_trace_shm_attach(&shm, fd);

	if (err)
		die("attach", err);
	pthread_barrier_init(&done, NULL, threads + 1);
	for (uint32_t i = 0; i < threads; i++) {
		wk[i] = (struct worker){.shm = &shm,
					.index = i,
					.id = id,
					.uncommitted = 1,
					.events = events / threads + (i < events % threads),
					.done = &done};
		pthread_create(&th[i], NULL, worker_main, &wk[i]);
	}
	pthread_barrier_wait(&done);
	for (uint32_t i = 0; i < threads; i++) {
		counts[0] += wk[i].committed;
		counts[1] += wk[i].discarded;
	}
	if (write(wfd, counts, sizeof(counts)) != sizeof(counts))
		_exit(1);
	for (;;)
		pause();
}

static int gen_crash(const char *dir, uint32_t threads, uint64_t events, bool no_loss)
{
	struct tp_trace_ring_opts ro = {
	    .nr_rings = threads, .nr_subbufs = 4, .flags = no_loss ? TP_TRACE_NO_LOSS : 0};
	struct tp_trace_consumer *c;
	struct tp_trace_writer *w;
	uint64_t counts[2];
	int pfd[2], id, err, status;
	pid_t pid;

	if (threads < 1 || threads > 64)
		die("threads", -EINVAL);
	w = new_trace(dir, 8192, &id);
	if ((err = tp_trace_consumer_new(w, &ro, &c)))
		die("consumer", err);
	if (pipe(pfd))
		die("pipe", -errno);
	pid = fork();
	if (pid < 0)
		die("fork", -errno);
	if (pid == 0) {
		close(pfd[0]);
		crash_child(tp_trace_consumer_fd(c), pfd[1], threads, events, id);
	}
	close(pfd[1]);
	for (;;) {
		struct pollfd pf = {.fd = pfd[0], .events = POLLIN};

		if ((err = tp_trace_consumer_poll(c)) < 0)
			die("poll", err);
		if (poll(&pf, 1, 1) == 1)
			break;
	}
	if (read(pfd[0], counts, sizeof(counts)) != sizeof(counts))
		die("child", -EPIPE);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		die("child status", -ECHILD);
	if ((err = tp_trace_consumer_flush(c)) < 0)
		die("flush", err);
	tp_trace_consumer_free(c);
	if ((err = tp_trace_writer_close(w)))
		die("close", err);
	printf("{\"produced\":%" PRIu64 ",\"discarded\":%" PRIu64 ",\"committed\":%" PRIu64 "}\n",
	       events, counts[1], counts[0]);
	return 0;
}

/* Kill a child whose threads produce without end (no_loss, so that every thread's events
 * form a gapless sequence) at an arbitrary point, packet switches included. */
static int gen_kill(const char *dir, uint32_t threads, uint32_t ms)
{
	struct tp_trace_ring_opts ro = {
	    .nr_rings = threads, .nr_subbufs = 4, .flags = TP_TRACE_NO_LOSS};
	struct tp_trace_consumer *c;
	struct tp_trace_writer *w;
	struct timespec start, now;
	uint64_t *progress;
	int id, err, status;
	pid_t pid;

	if (threads < 1 || threads > 64)
		die("threads", -EINVAL);
	progress = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (progress == MAP_FAILED)
		die("mmap", -errno);
	w = new_trace(dir, 4096, &id);
	if ((err = tp_trace_consumer_new(w, &ro, &c)))
		die("consumer", err);
	pid = fork();
	if (pid < 0)
		die("fork", -errno);
	if (pid == 0) {
		struct tp_trace_shm shm;
		struct worker wk[64];
		pthread_t th;

		if ((err = tp_trace_shm_attach(&shm, tp_trace_consumer_fd(c))))
			die("attach", err);
		for (uint32_t i = 0; i < threads; i++) {
			wk[i] = (struct worker){.shm = &shm,
						.index = i,
						.id = id,
						.events = UINT64_MAX,
						.progress = &progress[i]};
			pthread_create(&th, NULL, worker_main, &wk[i]);
		}
		for (;;)
			pause();
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		if ((err = tp_trace_consumer_poll(c)) < 0)
			die("poll", err);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	if ((err = tp_trace_consumer_flush(c)) < 0)
		die("flush", err);
	tp_trace_consumer_free(c);
	if ((err = tp_trace_writer_close(w)))
		die("close", err);
	/* A thread may die between its commit and its progress store: it committed p or p+1. */
	printf("{\"progress\":[");
	for (uint32_t i = 0; i < threads; i++)
		printf("%s%" PRIu64, i ? "," : "", progress[i]);
	printf("]}\n");
	return 0;
}

/* Overfill a ring of 4 x 4 KiB that the consumer does not drain, drain it once, overfill
 * it again; the first event is too large for any packet. */
static int gen_discard(const char *dir, uint64_t events)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 1, .nr_subbufs = 4};
	struct tp_trace_consumer *c;
	struct tp_trace_writer *w;
	struct tp_trace_producer p;
	struct tp_trace_shm shm;
	uint64_t ok = 0;
	int id, err;

	w = new_trace(dir, 4096, &id);
	if ((err = tp_trace_consumer_new(w, &ro, &c)))
		die("consumer", err);
	if ((err = tp_trace_shm_attach(&shm, tp_trace_consumer_fd(c))) ||
	    (err = tp_trace_shm_producer_init(&shm, &p)))
		die("producer", err);
	if (tp_trace_reserve(&p, (uint16_t)id, 8192))
		die("oversized event accepted", -EINVAL);
	for (uint64_t i = 0; i < events; i++) {
		ok += put_seq(&p, id, 0, i);
		if (i == events / 2 && (err = tp_trace_consumer_poll(c)) < 0)
			die("poll", err);
	}
	tp_trace_producer_fini(&p);
	if ((err = tp_trace_consumer_flush(c)) < 0)
		die("flush", err);
	tp_trace_shm_detach(&shm);
	tp_trace_consumer_free(c);
	if ((err = tp_trace_writer_close(w)))
		die("close", err);
	printf("{\"produced\":%" PRIu64 ",\"discarded\":%" PRIu64 ",\"committed\":%" PRIu64 "}\n",
	       events + 1, events + 1 - ok, ok);
	return 0;
}

int main(int argc, char **argv)
{
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "types"))
		return gen_types(argv[2], argc == 4 ? (uint32_t)atoi(argv[3]) : 3000);
	if (argc >= 5 && argc <= 7 && !strcmp(argv[1], "shm"))
		return gen_shm(argv[2], (uint32_t)atoi(argv[3]), strtoull(argv[4], NULL, 0),
			       argc > 5 ? (uint32_t)atoi(argv[5]) : 16,
			       argc > 6 && !strcmp(argv[6], "no_loss"));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "crash"))
		return gen_crash(argv[2], (uint32_t)atoi(argv[3]), strtoull(argv[4], NULL, 0),
				 argc == 6 && !strcmp(argv[5], "no_loss"));
	if (argc == 5 && !strcmp(argv[1], "kill"))
		return gen_kill(argv[2], (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]));
	if (argc == 4 && !strcmp(argv[1], "discard"))
		return gen_discard(argv[2], strtoull(argv[3], NULL, 0));
	fprintf(stderr, "usage: see the comment at the top of trace-gen.c\n");
	return 2;
}
