/* Shared-memory rings: attach checks, ring claims, committed-only visibility, exact discard
 * accounting, no_loss waits, and producers or consumers that break the protocol. */
#include "../tap.h"
#include "trace/trace-priv.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

static const struct tp_trace_field_desc seq_fields[] = {
    {"seq", TP_TRACE_INT, 64, false, 10, 0},
    {"pad", TP_TRACE_INT, 64, false, 16, 0},
};

struct env {
	char *dir;
	struct tp_trace_writer *w;
	struct tp_trace_consumer *c;
	struct tp_trace_shm shm;
	int id;
};

static void env_open(struct env *e, const char *tmp, const char *name,
		     const struct tp_trace_ring_opts *ro)
{
	struct tp_trace_opts o = {.packet_size = 4096};
	int err;

	e->dir = util_path(tmp, name);
	err = tp_trace_writer_new(e->dir, &o, &e->w);
	if (!err)
		e->id = tp_trace_writer_add_class(e->w, "t:seq", seq_fields, 2);
	if (!err)
		err = tp_trace_consumer_new(e->w, ro, &e->c);
	if (!err)
		err = tp_trace_shm_attach(&e->shm, tp_trace_consumer_fd(e->c));
	if (err) {
		printf("Bail out! %s: setup failed: %d\n", name, err);
		exit(1);
	}
}

static void env_close(struct env *e)
{
	tp_trace_shm_detach(&e->shm);
	tp_trace_consumer_free(e->c);
	tp_trace_writer_close(e->w);
}

static bool put(struct tp_trace_producer *p, int id, uint64_t seq, bool commit)
{
	uint8_t *e = tp_trace_reserve(p, (uint16_t)id, 16);

	if (!e)
		return false;
	tp_trace_put_u64(tp_trace_put_u64(e, seq), 0x5eed0000 + seq);
	if (commit)
		tp_trace_commit(p);
	return true;
}

/* Reads back the trace: event count, discards, and whether each thread's seqs are
 * increasing with the right payload. */
static int64_t read_back(const char *dir, uint64_t *discarded)
{
	struct tp_trace_reader *r;
	const struct tp_trace_event *ev;
	int64_t n = 0, last[64];
	int err;

	memset(last, 0xff, sizeof(last));
	if (tp_trace_reader_open(dir, &r))
		return -1;
	while ((err = tp_trace_reader_next(r, &ev)) > 0) {
		const struct tp_trace_field *s = tp_trace_event_field(ev, "seq");
		const struct tp_trace_field *pad = tp_trace_event_field(ev, "pad");

		if (!s || !pad || pad->u != 0x5eed0000 + s->u || ev->stream >= 64 ||
		    (int64_t)s->u <= last[ev->stream]) {
			n = -2;
			break;
		}
		last[ev->stream] = (int64_t)s->u;
		n++;
	}
	if (err < 0)
		n = err;
	*discarded = tp_trace_reader_discarded(r);
	tp_trace_reader_close(r);
	return n;
}

static void test_attach(const char *tmp)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 2, .nr_subbufs = 2};
	struct tp_trace_shm bad;
	struct tp_shm_hdr *h, save;
	struct env e;
	int fd = memfd_create("unsealed", MFD_CLOEXEC);

	env_open(&e, tmp, "attach", &ro);
	ok(e.shm.nr_rings == 2 && e.shm.nr_subbufs == 2 && e.shm.packet_size == 4096,
	   "attach copies the geometry");
	ftruncate(fd, 1 << 20);
	is_int(tp_trace_shm_attach(&bad, fd), -EPERM, "a memfd that may shrink is refused");
	close(fd);
	h = (struct tp_shm_hdr *)e.shm.base;
	save = *h;
	h->magic ^= 1;
	is_int(tp_trace_shm_attach(&bad, tp_trace_consumer_fd(e.c)), -EINVAL, "bad magic");
	*h = save;
	h->nr_subbufs = 1;
	is_int(tp_trace_shm_attach(&bad, tp_trace_consumer_fd(e.c)), -EINVAL, "one sub-buffer");
	*h = save;
	h->nr_rings = 1000;
	is_int(tp_trace_shm_attach(&bad, tp_trace_consumer_fd(e.c)), -EINVAL,
	       "rings beyond the mapping");
	*h = save;
	h->data_off = h->total_size;
	is_int(tp_trace_shm_attach(&bad, tp_trace_consumer_fd(e.c)), -EINVAL,
	       "data offset beyond the mapping");
	*h = save;
	h->packet_size = 1u << 31;
	is_int(tp_trace_shm_attach(&bad, tp_trace_consumer_fd(e.c)), -EINVAL, "huge packet size");
	*h = save;
	is_int(tp_trace_shm_attach(&bad, tp_trace_consumer_fd(e.c)), 0, "restored header is fine");
	tp_trace_shm_detach(&bad);
	env_close(&e);
	free(e.dir);
}

static void test_claims(const char *tmp)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 2, .nr_subbufs = 4};
	struct tp_trace_producer p[3];
	uint64_t disc;
	struct env e;

	env_open(&e, tmp, "claims", &ro);
	is_int(tp_trace_shm_producer_init(&e.shm, &p[0]), 0, "first ring claimed");
	is_int(tp_trace_shm_producer_init(&e.shm, &p[1]), 0, "second ring claimed");
	is_int(tp_trace_shm_producer_init(&e.shm, &p[2]), -EBUSY, "no third ring");
	ok(!tp_trace_reserve(&p[2], (uint16_t)e.id, 16), "a producer without a ring discards");
	for (uint64_t i = 0; i < 10; i++)
		put(&p[0], e.id, i, true);
	tp_trace_producer_fini(&p[0]);
	is_int(tp_trace_shm_producer_init(&e.shm, &p[2]), 0, "a released ring is claimed again");
	for (uint64_t i = 10; i < 20; i++)
		put(&p[2], e.id, i, true);
	/* A thread that disappears without closing: the next owner appends to its packet. */
	put(&p[1], e.id, 0, true);
	__atomic_store_n(p[1].shm_state, TP_SHM_RING_FREE, __ATOMIC_RELEASE);
	is_int(tp_trace_shm_producer_init(&e.shm, &p[0]), 0, "an abandoned ring is claimed");
	is_int(p[0].off, TP_PKT_HDR + TP_TRACE_EVENT_HDR + 16, "its open packet is adopted");
	put(&p[0], e.id, 1, true);
	tp_trace_producer_fini(&p[0]);
	tp_trace_producer_fini(&p[2]);
	is_int(tp_trace_consumer_flush(e.c), 3, "three packets written");
	env_close(&e);
	is_int(read_back(e.dir, &disc), 22, "a reused ring continues its stream");
	free(e.dir);
}

static void test_partial(const char *tmp)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 1, .nr_subbufs = 8};
	struct tp_trace_producer p;
	uint64_t disc, n = 0, per_packet = (4096 - TP_PKT_HDR) / (TP_TRACE_EVENT_HDR + 16);
	struct env e;

	env_open(&e, tmp, "partial", &ro);
	tp_trace_shm_producer_init(&e.shm, &p);
	for (uint64_t i = 0; i < 3 * per_packet - 10; i++)
		n += put(&p, e.id, i, true);
	is_int(tp_trace_consumer_poll(e.c), 2, "two full packets drained, the open one stays");
	is_int(tp_trace_consumer_poll(e.c), 0, "nothing more to drain");
	put(&p, e.id, n, false); /* reserved, written, never committed */
	/* The producer is gone (as if killed): no fini. */
	is_int(tp_trace_consumer_flush(e.c), 1, "flush writes the open packet");
	is_int(tp_trace_consumer_flush(e.c), 0, "a second flush writes nothing");
	is_int(tp_trace_consumer_poll(e.c), 0, "nor does a poll after it");
	env_close(&e);
	is_int(read_back(e.dir, &disc), (int64_t)n, "exactly the committed events are read");
	is_int(disc, 0, "nothing discarded");
	free(e.dir);
}

static void test_discards(const char *tmp)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 1, .nr_subbufs = 2};
	struct tp_trace_producer p;
	uint64_t disc, n = 0;
	struct env e;

	env_open(&e, tmp, "discards", &ro);
	tp_trace_shm_producer_init(&e.shm, &p);
	for (uint64_t i = 0; i < 1000; i++)
		n += put(&p, e.id, i, true);
	ok(p.discarded > 0 && p.discarded + n == 1000, "full ring: %lu kept, %lu discarded",
	   (unsigned long)n, (unsigned long)p.discarded);
	is_int(__atomic_load_n(p.shm_discarded, __ATOMIC_RELAXED), p.discarded,
	       "the count is in shared memory for the consumer");
	tp_trace_consumer_poll(e.c);
	for (uint64_t i = 1000; i < 1500; i++)
		n += put(&p, e.id, i, true);
	tp_trace_producer_fini(&p);
	tp_trace_consumer_flush(e.c);
	env_close(&e);
	is_int(read_back(e.dir, &disc) + (int64_t)disc, 1500, "read + discarded == produced");
	is_int(disc, 1500 - n, "the reader's discard count is the producer's");
	free(e.dir);
}

struct drainer {
	struct tp_trace_consumer *c;
	int stop;
};

static void *drain_main(void *arg)
{
	struct drainer *d = arg;

	while (!__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE))
		if (tp_trace_consumer_poll(d->c) == 0)
			usleep(100);
	return NULL;
}

static void test_no_loss(const char *tmp)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 1, .nr_subbufs = 2, .flags = TP_TRACE_NO_LOSS};
	struct tp_trace_producer p;
	struct drainer d;
	pthread_t th;
	uint64_t disc, n = 0;
	struct env e;

	env_open(&e, tmp, "noloss", &ro);
	d = (struct drainer){.c = e.c};
	pthread_create(&th, NULL, drain_main, &d);
	tp_trace_shm_producer_init(&e.shm, &p);
	for (uint64_t i = 0; i < 20000; i++)
		n += put(&p, e.id, i, true);
	tp_trace_producer_fini(&p);
	__atomic_store_n(&d.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	tp_trace_consumer_flush(e.c);
	env_close(&e);
	is_int(n, 20000, "no_loss: every reserve succeeded with a 2-packet ring");
	is_int(read_back(e.dir, &disc), 20000, "no_loss: every event read");
	free(e.dir);

	/* Nobody drains: after wait_ns the producer gives up and counts the loss. */
	ro.wait_ns = 2000000;
	env_open(&e, tmp, "noloss-timeout", &ro);
	tp_trace_shm_producer_init(&e.shm, &p);
	n = 0;
	for (uint64_t i = 0; i < 300; i++)
		n += put(&p, e.id, i, true);
	ok(p.discarded > 0 && n + p.discarded == 300, "no_loss gives up after wait_ns");
	tp_trace_producer_fini(&p);
	tp_trace_consumer_flush(e.c);
	env_close(&e);
	is_int(read_back(e.dir, &disc), (int64_t)n, "no_loss timeout: kept events read");
	is_int(disc, 300 - n, "no_loss timeout: discards recorded");
	free(e.dir);
}

static void test_hostile(const char *tmp)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 3, .nr_subbufs = 4};
	struct tp_trace_producer p[3];
	struct env e;
	uint64_t disc;

	env_open(&e, tmp, "hostile", &ro);
	for (int i = 0; i < 3; i++)
		tp_trace_shm_producer_init(&e.shm, &p[i]);
	for (uint64_t i = 0; i < 400; i++)
		for (int k = 0; k < 3; k++)
			put(&p[k], e.id, i, true);
	/* Ring 0 claims to be far ahead, ring 1 has a closed packet with a lying size. */
	__atomic_store_n(p[0].shm_pos, (uint64_t)1000 << 32 | 100, __ATOMIC_RELEASE);
	tp_trace_put_u64(p[1].data + TP_PKT_CONTENT_SIZE, 1ull << 40);
	is_int(tp_trace_consumer_poll(e.c), 3, "only the honest ring's packets are written");
	is_int(tp_trace_consumer_poll(e.c), 0, "the broken rings stay dropped");
	/* A lying consumer: claims to have consumed packets not yet produced. */
	__atomic_store_n((uint64_t *)p[2].shm_cons, 1000, __ATOMIC_RELEASE);
	disc = p[2].discarded;
	for (uint64_t i = 400; i < 800; i++)
		put(&p[2], e.id, i, true);
	ok(p[2].discarded > disc, "the producer treats a consumer ahead of it as a full ring");
	__atomic_store_n((uint64_t *)p[2].shm_cons, 2, __ATOMIC_RELEASE);
	for (int k = 0; k < 3; k++)
		tp_trace_producer_fini(&p[k]);
	ok(tp_trace_consumer_flush(e.c) >= 0, "flush survives the broken rings");
	env_close(&e);
	ok(read_back(e.dir, &disc) > 0, "the trace stays readable");
	free(e.dir);
}

static void *wait_main(void *arg)
{
	struct tp_trace_producer *p = arg;
	uint64_t n = 0;

	for (uint64_t i = 0; i < 1000; i++)
		n += put(p, 0, i, true);
	return (void *)(uintptr_t)n;
}

static void test_consumer_gone(const char *tmp)
{
	struct tp_trace_ring_opts ro = {.nr_rings = 1, .nr_subbufs = 2, .flags = TP_TRACE_NO_LOSS};
	struct tp_trace_producer p;
	struct env e;
	pthread_t th;
	void *n;

	env_open(&e, tmp, "gone", &ro);
	tp_trace_shm_producer_init(&e.shm, &p);
	pthread_create(&th, NULL, wait_main, &p);
	usleep(20000);
	/* The consumer goes away without draining; keep our mapping alive for the producer. */
	__atomic_store_n(&((struct tp_shm_hdr *)e.shm.base)->consumer_gone, 1, __ATOMIC_RELEASE);
	pthread_join(th, &n);
	ok((uintptr_t)n < 1000 && (uintptr_t)n + p.discarded == 1000,
	   "a no_loss producer stops waiting when the consumer is gone");
	tp_trace_producer_fini(&p);
	env_close(&e);
	free(e.dir);
}

int main(void)
{
	char *tmp = util_tmpdir();

	test_attach(tmp);
	test_claims(tmp);
	test_partial(tmp);
	test_discards(tmp);
	test_no_loss(tmp);
	test_hostile(tmp);
	test_consumer_gone(tmp);
	util_rmtree(tmp);
	free(tmp);
	return tap_done();
}
