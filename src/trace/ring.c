/* The producer side of the shared-memory rings: attach to the consumer's memfd, claim a
 * ring per thread, switch packets.  Runs inside traced programs: no malloc, no stdio, no
 * lock, and nothing read from the shared memory is used as an address without a check. */
#include "trace/trace-priv.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void tp_trace_packet_open(uint8_t *pkt, const uint8_t uuid[16], uint32_t producer,
			  uint64_t ts_begin)
{
	uint32_t magic = TP_TRACE_MAGIC, zero = 0;

	memcpy(pkt + TP_PKT_MAGIC, &magic, 4);
	memcpy(pkt + TP_PKT_UUID, uuid, 16);
	memcpy(pkt + TP_PKT_STREAM_ID, &zero, 4);
	tp_trace_put_u64(pkt + TP_PKT_TS_BEGIN, ts_begin);
	memset(pkt + TP_PKT_TS_END, 0, TP_PKT_PRODUCER - TP_PKT_TS_END);
	memcpy(pkt + TP_PKT_PRODUCER, &producer, 4);
}

void tp_trace_packet_close(uint8_t *pkt, uint32_t content, uint32_t size, uint64_t ts_end,
			   uint64_t discarded)
{
	tp_trace_put_u64(pkt + TP_PKT_TS_END, ts_end);
	tp_trace_put_u64(pkt + TP_PKT_CONTENT_SIZE, (uint64_t)content * 8);
	tp_trace_put_u64(pkt + TP_PKT_PACKET_SIZE, (uint64_t)size * 8);
	tp_trace_put_u64(pkt + TP_PKT_DISCARDED, discarded);
}

int tp_trace_shm_check(const struct tp_shm_hdr *h, size_t map_size)
{
	unsigned __int128 end;

	if (h->magic != TP_SHM_MAGIC || h->version != TP_SHM_VERSION || h->hdr_size != sizeof(*h) ||
	    h->ring_ctl_size != sizeof(struct tp_shm_ring))
		return -EINVAL;
	if (!h->nr_rings || h->nr_rings > TP_SHM_MAX_RINGS || h->nr_subbufs < 2 ||
	    h->nr_subbufs > TP_SHM_MAX_SUBBUFS)
		return -EINVAL;
	if (h->packet_size % 8 || h->packet_size < TP_TRACE_MIN_PACKET ||
	    h->packet_size > TP_TRACE_MAX_PACKET)
		return -EINVAL;
	if ((h->flags & ~TP_TRACE_NO_LOSS) ||
	    (h->clock != TP_TRACE_CLOCK_MONOTONIC && h->clock != TP_TRACE_CLOCK_TSC))
		return -EINVAL;
	if (h->ctl_off < sizeof(*h) || h->ctl_off % 64 || h->data_off % 64)
		return -EINVAL;
	end = (unsigned __int128)h->ctl_off +
	      (unsigned __int128)h->nr_rings * sizeof(struct tp_shm_ring);
	if (end > h->data_off)
		return -EINVAL;
	end = (unsigned __int128)h->data_off +
	      (unsigned __int128)h->nr_rings * h->nr_subbufs * h->packet_size;
	if (end != h->total_size || end > map_size)
		return -EINVAL;
	return 0;
}

int tp_trace_shm_attach(struct tp_trace_shm *shm, int fd)
{
	struct tp_shm_hdr h;
	struct stat st;
	void *base;
	int seals;

	memset(shm, 0, sizeof(*shm));
	if (fstat(fd, &st))
		return -errno;
	if (st.st_size < (off_t)sizeof(h))
		return -EINVAL;
	/* Without the seal the consumer could shrink the file and make us fault. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	/* Populated at attach, as LTTng-UST does: no page fault on the producers' fast path. */
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
		    0);
	if (base == MAP_FAILED)
		return -errno;
	/* Validate a private copy: the header may change under us. */
	memcpy(&h, base, sizeof(h));
	if (tp_trace_shm_check(&h, (size_t)st.st_size)) {
		munmap(base, (size_t)st.st_size);
		return -EINVAL;
	}
	shm->base = base;
	shm->size = (size_t)st.st_size;
	shm->nr_rings = h.nr_rings;
	shm->nr_subbufs = h.nr_subbufs;
	shm->packet_size = h.packet_size;
	shm->flags = h.flags;
	shm->clock = h.clock;
	shm->ctl_off = h.ctl_off;
	shm->data_off = h.data_off;
	shm->wait_ns = h.wait_ns;
	memcpy(shm->uuid, h.uuid, 16);
	return 0;
}

void tp_trace_shm_detach(struct tp_trace_shm *shm)
{
	if (shm && shm->base)
		munmap(shm->base, shm->size);
	if (shm)
		memset(shm, 0, sizeof(*shm));
}

void tp_trace_shm_discard_ringless(struct tp_trace_shm *shm, uint64_t n)
{
	if (shm->base)
		__atomic_fetch_add(&((struct tp_shm_hdr *)shm->base)->ringless, n,
				   __ATOMIC_RELAXED);
}

int tp_trace_shm_producer_init(struct tp_trace_shm *shm, struct tp_trace_producer *p)
{
	struct tp_shm_ring *ring = NULL;
	uint64_t pos;
	uint32_t i, bytes;

	memset(p, 0, sizeof(*p));
	if (!shm->base)
		return -EINVAL;
	for (i = 0; i < shm->nr_rings; i++) {
		struct tp_shm_ring *r = (struct tp_shm_ring *)(shm->base + shm->ctl_off) + i;
		uint32_t expected = TP_SHM_RING_FREE;

		if (__atomic_compare_exchange_n(&r->state, &expected, TP_SHM_RING_CLAIMED, false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			ring = r;
			break;
		}
	}
	if (!ring)
		return -EBUSY;
	p->slow = tp_trace_shm_switch;
	p->fini = tp_trace_shm_producer_fini;
	p->ring = i;
	p->stream_id = i;
	p->clock = shm->clock;
	p->packet_size = shm->packet_size;
	p->nr_subbufs = shm->nr_subbufs;
	p->flags = shm->flags;
	p->wait_ns = shm->wait_ns;
	p->data = shm->base + shm->data_off + (uint64_t)i * shm->nr_subbufs * shm->packet_size;
	p->priv = shm->base;
	memcpy(p->uuid, shm->uuid, 16);
	p->shm_pos = &ring->pos;
	p->shm_ts = &ring->last_ts;
	p->shm_discarded = &ring->discarded;
	p->shm_cons = &ring->cons;
	p->shm_state = &ring->state;
	p->pid = getpid();
	p->tid = gettid();
	__atomic_store_n(&ring->pid, p->pid, __ATOMIC_RELAXED);
	__atomic_store_n(&ring->tid, p->tid, __ATOMIC_RELAXED);
	p->discarded = __atomic_load_n(&ring->discarded, __ATOMIC_RELAXED);
	p->last_ts = __atomic_load_n(&ring->last_ts, __ATOMIC_RELAXED);
	/* A previous owner that went away without closing its packet: append to it. */
	pos = __atomic_load_n(&ring->pos, __ATOMIC_ACQUIRE);
	p->seq = pos >> 32;
	bytes = (uint32_t)pos;
	if (bytes >= TP_PKT_HDR && bytes <= p->packet_size) {
		p->buf = p->data + (p->seq % p->nr_subbufs) * p->packet_size;
		p->off = bytes;
		p->limit = p->packet_size;
		p->pos_hi = p->seq << 32;
	} else if (bytes) {
		p->seq++;
	}
	return 0;
}

static bool consumer_gone(const struct tp_trace_producer *p)
{
	const struct tp_shm_hdr *h = p->priv;

	return __atomic_load_n(&h->consumer_gone, __ATOMIC_RELAXED) != 0;
}

/* no_loss: spin briefly, then yield, then sleep; false once the deadline has passed. */
static bool wait_for_consumer(struct tp_trace_producer *p, unsigned int round, uint64_t start)
{
	if (consumer_gone(p))
		return false;
	if (p->wait_ns && tp_trace_clock_now(TP_TRACE_CLOCK_MONOTONIC) - start > p->wait_ns)
		return false;
	if (round < 64) {
#if defined(__x86_64__)
		__builtin_ia32_pause();
#endif
	} else if (round < 256) {
		sched_yield();
	} else {
		struct timespec ts = {0, 50000};

		nanosleep(&ts, NULL);
	}
	return true;
}

static bool discard(struct tp_trace_producer *p)
{
	p->discarded++;
	__atomic_store_n(p->shm_discarded, p->discarded, __ATOMIC_RELEASE);
	return false;
}

bool tp_trace_shm_switch(struct tp_trace_producer *p, uint64_t total, uint64_t ts)
{
	uint64_t next = p->limit ? p->seq + 1 : p->seq, start = 0;
	unsigned int round = 0;

	if (total > p->packet_size - TP_PKT_HDR)
		return discard(p);
	for (;;) {
		uint64_t cons = __atomic_load_n(p->shm_cons, __ATOMIC_ACQUIRE);

		/* A consumer claiming to be ahead of us is lying: treat the ring as full. */
		if (cons <= next && next - cons < p->nr_subbufs)
			break;
		if (!(p->flags & TP_TRACE_NO_LOSS))
			return discard(p);
		if (!round && p->wait_ns)
			start = tp_trace_clock_now(TP_TRACE_CLOCK_MONOTONIC);
		if (!wait_for_consumer(p, round++, start))
			return discard(p);
	}
	if (p->limit)
		tp_trace_packet_close(p->buf, p->off, p->packet_size, p->last_ts, p->discarded);
	p->buf = p->data + (next % p->nr_subbufs) * p->packet_size;
	tp_trace_packet_open(p->buf, p->uuid, p->stream_id, ts);
	tp_trace_put_u64(p->buf + TP_PKT_SEQ_NUM, next);
	p->seq = next;
	p->pos_hi = next << 32;
	p->off = TP_PKT_HDR;
	p->limit = p->packet_size;
	p->nr_events = 0;
	/* Publishes the close of the previous packet and the header of this one together. */
	__atomic_store_n(p->shm_pos, p->pos_hi | p->off, __ATOMIC_RELEASE);
	return true;
}

int tp_trace_shm_producer_fini(struct tp_trace_producer *p)
{
	if (p->limit) {
		tp_trace_packet_close(p->buf, p->off, p->packet_size, p->last_ts, p->discarded);
		__atomic_store_n(p->shm_pos, (p->seq + 1) << 32, __ATOMIC_RELEASE);
	}
	__atomic_store_n(p->shm_state, TP_SHM_RING_FREE, __ATOMIC_RELEASE);
	memset(p, 0, sizeof(*p));
	return 0;
}

bool tp_trace_reserve_slow(struct tp_trace_producer *p, uint64_t total, uint64_t ts)
{
	return p->slow ? p->slow(p, total, ts) : false;
}

int tp_trace_producer_fini(struct tp_trace_producer *p)
{
	return p->fini ? p->fini(p) : 0;
}
