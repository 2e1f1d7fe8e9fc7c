/* The consumer side of the shared-memory rings, in the tracepad process: creates the memfd,
 * copies closed packets to stream files while producers run, and at the end writes what
 * was committed in packets left open, even by a producer that was killed. */
#include "trace/trace-priv.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct ring_state {
	struct tp_trace_stream *st;
	uint64_t cons;
	bool broken;
	bool flushed_open; /* cons went past the packet the producer still has open */
};

struct tp_trace_consumer {
	struct tp_trace_writer *w;
	int fd;
	uint8_t *base;
	size_t size;
	uint32_t nr_rings, nr_subbufs, packet_size;
	uint64_t ctl_off, data_off;
	struct ring_state *rings;
	uint8_t *pkt; /* private copy of the packet being written */
};

static int map_memfd(struct tp_trace_consumer *c, size_t size)
{
	c->fd = memfd_create("tracepad-trace", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->fd < 0)
		return -errno;
	if (ftruncate(c->fd, (off_t)size))
		return -errno;
	/* Producers refuse a memfd that could shrink under them; neither side may resize. */
	if (fcntl(c->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return -errno;
	c->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
	if (c->base == MAP_FAILED) {
		c->base = NULL;
		return -errno;
	}
	c->size = size;
	return 0;
}

int tp_trace_consumer_new(struct tp_trace_writer *w, const struct tp_trace_ring_opts *opts,
			  struct tp_trace_consumer **out)
{
	struct tp_trace_consumer *c;
	struct tp_shm_hdr *h;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	unsigned __int128 total;
	int err;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->w = w;
	c->nr_rings = opts && opts->nr_rings ? opts->nr_rings : 16;
	c->nr_subbufs = opts && opts->nr_subbufs ? opts->nr_subbufs : 8;
	c->packet_size = tp_trace_writer_packet_size(w);
	err = -EINVAL;
	if (c->nr_rings > TP_SHM_MAX_RINGS || c->nr_subbufs < 2 ||
	    c->nr_subbufs > TP_SHM_MAX_SUBBUFS || (opts && (opts->flags & ~TP_TRACE_NO_LOSS)))
		goto err_free;
	c->ctl_off = (sizeof(struct tp_shm_hdr) + 63) & ~63ull;
	c->data_off = (c->ctl_off + (uint64_t)c->nr_rings * sizeof(struct tp_shm_ring) + page - 1) &
		      ~(page - 1);
	total = c->data_off + (unsigned __int128)c->nr_rings * c->nr_subbufs * c->packet_size;
	if (total > (1ull << 40))
		goto err_free;
	err = -ENOMEM;
	/* One more stream than rings: the discards of producers that found no ring. */
	c->rings = calloc(c->nr_rings + 1, sizeof(*c->rings));
	c->pkt = malloc(c->packet_size);
	if (!c->rings || !c->pkt)
		goto err_free;
	err = map_memfd(c, (size_t)total);
	if (err)
		goto err_map;
	h = (struct tp_shm_hdr *)c->base;
	h->magic = TP_SHM_MAGIC;
	h->version = TP_SHM_VERSION;
	h->hdr_size = sizeof(*h);
	h->ring_ctl_size = sizeof(struct tp_shm_ring);
	h->nr_rings = c->nr_rings;
	h->nr_subbufs = c->nr_subbufs;
	h->packet_size = c->packet_size;
	h->flags = opts ? opts->flags : 0;
	h->wait_ns = opts ? opts->wait_ns : 0;
	h->clock = tp_trace_writer_clock(w);
	h->ctl_off = c->ctl_off;
	h->data_off = c->data_off;
	h->total_size = (uint64_t)total;
	memcpy(h->uuid, tp_trace_writer_uuid(w), 16);
	*out = c;
	return 0;

err_map:
	if (c->base)
		munmap(c->base, c->size);
	if (c->fd >= 0)
		close(c->fd);
err_free:
	free(c->pkt);
	free(c->rings);
	free(c);
	return err;
}

int tp_trace_consumer_fd(const struct tp_trace_consumer *c)
{
	return c->fd;
}

static struct tp_shm_ring *ring_ctl(struct tp_trace_consumer *c, uint32_t i)
{
	return (struct tp_shm_ring *)(c->base + c->ctl_off) + i;
}

static uint8_t *subbuf(struct tp_trace_consumer *c, uint32_t i, uint64_t seq)
{
	return c->base + c->data_off +
	       ((uint64_t)i * c->nr_subbufs + seq % c->nr_subbufs) * c->packet_size;
}

static void broken(struct tp_trace_consumer *c, uint32_t i, const char *why)
{
	tp_warn("trace: ring %u dropped: %s", i, why);
	c->rings[i].broken = true;
}

static int emit(struct tp_trace_consumer *c, uint32_t i, uint32_t content)
{
	struct ring_state *r = &c->rings[i];
	int err;

	if (!r->st) {
		err = tp_trace_writer_stream_new(c->w, UINT32_MAX, &r->st);
		if (err)
			return err;
	}
	return tp_trace_stream_write(c->w, r->st, c->pkt, content);
}

/* Copy out the closed packets of ring @i; returns how many or -errno (I/O). */
static int drain(struct tp_trace_consumer *c, uint32_t i)
{
	struct ring_state *r = &c->rings[i];
	struct tp_shm_ring *ctl = ring_ctl(c, i);
	uint64_t pos = __atomic_load_n(&ctl->pos, __ATOMIC_ACQUIRE);
	uint32_t ahead = (uint32_t)(pos >> 32) - (uint32_t)r->cons, bytes = (uint32_t)pos;
	int n = 0;

	if (r->flushed_open && ahead == UINT32_MAX)
		return 0;
	r->flushed_open = false;
	if (ahead > c->nr_subbufs || (bytes && (bytes < TP_PKT_HDR || bytes > c->packet_size))) {
		broken(c, i, "position out of range");
		return 0;
	}
	for (; ahead; ahead--) {
		uint64_t content;
		int err;

		memcpy(c->pkt, subbuf(c, i, r->cons), c->packet_size);
		content = tp_get_u64(c->pkt + TP_PKT_CONTENT_SIZE);
		if (content % 8 || content / 8 < TP_PKT_HDR || content / 8 > c->packet_size) {
			broken(c, i, "packet content size out of range");
			return n;
		}
		err = emit(c, i, (uint32_t)(content / 8));
		if (err)
			return err;
		r->cons++;
		__atomic_store_n(&ctl->cons, r->cons, __ATOMIC_RELEASE);
		n++;
	}
	return n;
}

int tp_trace_consumer_poll(struct tp_trace_consumer *c)
{
	int total = 0;

	for (uint32_t i = 0; i < c->nr_rings; i++) {
		int n;

		if (c->rings[i].broken)
			continue;
		n = drain(c, i);
		if (n < 0)
			return n;
		total += n;
	}
	return total;
}

/* The open packet of a producer that stopped: its committed part, with the context the
 * producer had no chance to fill. */
static int flush_open(struct tp_trace_consumer *c, uint32_t i)
{
	struct ring_state *r = &c->rings[i];
	struct tp_shm_ring *ctl = ring_ctl(c, i);
	uint64_t pos = __atomic_load_n(&ctl->pos, __ATOMIC_ACQUIRE);
	uint64_t last_ts = __atomic_load_n(&ctl->last_ts, __ATOMIC_RELAXED);
	uint64_t discarded = __atomic_load_n(&ctl->discarded, __ATOMIC_RELAXED);
	uint32_t bytes = (uint32_t)pos;
	uint64_t done = r->st ? tp_trace_stream_discarded(r->st) : 0;
	int err;

	if ((uint32_t)(pos >> 32) == (uint32_t)r->cons && bytes > TP_PKT_HDR) {
		if (bytes > c->packet_size) {
			broken(c, i, "position out of range");
			return 0;
		}
		memcpy(c->pkt, subbuf(c, i, r->cons), bytes);
		tp_trace_packet_close(c->pkt, bytes, c->packet_size, last_ts,
				      discarded > done ? discarded : done);
		err = emit(c, i, bytes);
		if (err)
			return err;
		r->cons++;
		r->flushed_open = true;
		__atomic_store_n(&ctl->cons, r->cons, __ATOMIC_RELEASE);
		return 1;
	}
	if (discarded > done) {
		/* Events were lost after the last packet: an empty packet carries the count. */
		uint64_t now = tp_trace_clock_now(tp_trace_writer_clock(c->w));
		uint64_t ts = now > last_ts ? now : last_ts;

		tp_trace_packet_open(c->pkt, tp_trace_writer_uuid(c->w), i, ts);
		tp_trace_packet_close(c->pkt, TP_PKT_HDR, c->packet_size, ts, discarded);
		err = emit(c, i, TP_PKT_HDR);
		return err ? err : 1;
	}
	return 0;
}

/* The events of producers without a ring, as the discard count of an empty packet on a
 * stream of their own (instance nr_rings), when it grew. */
static int flush_ringless(struct tp_trace_consumer *c)
{
	const struct tp_shm_hdr *h = (const struct tp_shm_hdr *)c->base;
	struct ring_state *r = &c->rings[c->nr_rings];
	uint64_t lost = __atomic_load_n(&h->ringless, __ATOMIC_RELAXED);
	uint64_t done = r->st ? tp_trace_stream_discarded(r->st) : 0;
	uint64_t ts = tp_trace_clock_now(tp_trace_writer_clock(c->w));
	int err;

	if (lost <= done)
		return 0;
	tp_trace_packet_open(c->pkt, tp_trace_writer_uuid(c->w), c->nr_rings, ts);
	tp_trace_packet_close(c->pkt, TP_PKT_HDR, c->packet_size, ts, lost);
	err = emit(c, c->nr_rings, TP_PKT_HDR);
	return err ? err : 1;
}

int tp_trace_consumer_flush(struct tp_trace_consumer *c)
{
	int total = tp_trace_consumer_poll(c), n;

	if (total < 0)
		return total;
	for (uint32_t i = 0; i < c->nr_rings; i++) {
		if (c->rings[i].broken)
			continue;
		n = flush_open(c, i);
		if (n < 0)
			return n;
		total += n;
	}
	n = flush_ringless(c);
	return n < 0 ? n : total + n;
}

void tp_trace_consumer_free(struct tp_trace_consumer *c)
{
	if (!c)
		return;
	if (c->base) {
		__atomic_store_n(&((struct tp_shm_hdr *)c->base)->consumer_gone, 1,
				 __ATOMIC_RELEASE);
		munmap(c->base, c->size);
	}
	if (c->fd >= 0)
		close(c->fd);
	free(c->pkt);
	free(c->rings);
	free(c);
}
