/* The per-thread byte rings of the agent's shared blocks (fast tracepoints, call hooks): a
 * thread claims one ring and is its only writer, tracepad drains it.  The rings are
 * tracept-abi.h's struct tp_ftp_ring; a record starts with a u32 size and a u16 tag,
 * TP_FTP_REC_FILL for the filler up to the end of the ring.  General-regs-only code. */
#ifndef TP_AGENT_RING_H
#define TP_AGENT_RING_H

#include <stdint.h>

#include "agent/tracept-abi.h"

struct tp_ag_rings {
	struct tp_ftp_ring *rings;
	uint8_t *data; /* n * size bytes */
	uint32_t n, size;
	int32_t pid;
	/* asked now and then while a ring stays full: non-zero when tracepad is gone (the
	 * frame is dropped then) */
	int (*gone)(void);
};

/* A thread's hold on a ring, kept in its thread-local state. */
struct tp_ag_writer {
	int32_t ring;  /* -1: none yet, -2: none to be had */
	int32_t tid;   /* 0: not known yet */
	uint64_t tail; /* the ring's tail as last read: re-read only when it looks full */
};

/* The writer's ring, claimed at its first record: a free one, else one whose thread has
 * exited; NULL when every ring is some live thread's. */
struct tp_ftp_ring *tp_ag_ring_own(const struct tp_ag_rings *rs, struct tp_ag_writer *w)
    __attribute__((visibility("hidden")));

/* Room for @need bytes in the writer's ring (claimed already), waiting for tracepad while it
 * is full: the record's address and *@rp, or NULL.  The caller writes the record, then
 * publishes it by adding its size to (*@rp)->head (release). */
uint8_t *tp_ag_ring_reserve(const struct tp_ag_rings *rs, struct tp_ag_writer *w, uint32_t need,
			    struct tp_ftp_ring **rp) __attribute__((visibility("hidden")));

/* tp_ag_ring_reserve's common case inline: room known, no filler. */
static inline uint8_t *tp_ag_ring_reserve_fast(const struct tp_ag_rings *rs, struct tp_ag_writer *w,
					       uint32_t need, struct tp_ftp_ring **rp)
{
	struct tp_ftp_ring *r = &rs->rings[w->ring];
	uint64_t head = r->head, pos = head & (rs->size - 1);

	if (pos + need > rs->size || rs->size - (head - w->tail) < need)
		return tp_ag_ring_reserve(rs, w, need, rp);
	*rp = r;
	return rs->data + (uint64_t)w->ring * rs->size + pos;
}

#endif
