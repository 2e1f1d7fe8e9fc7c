/* The per-thread rings of the agent's shared blocks, shared by fast tracepoints (tracept.c)
 * and call hooks (hooks.c): claiming a ring and reserving room in it (ring.h). */
#include <errno.h>
#include <linux/futex.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>

#include "agent/ring.h"
#include "rt/raw.h"

/* A thread whose ring stays full waits for tracepad to drain it, so long at most before it
 * looks for tracepad's death (a record is lost only then). */
#define WAIT_NS 1000000

/* A ring's owner, tid and pid in one word, taken by one CAS: a thread of another process
 * sharing the block (a fork child's, with -f) never sees the tid of one owner with the pid
 * of another. */
typedef uint64_t __attribute__((may_alias)) owner_t;
_Static_assert(offsetof(struct tp_ftp_ring, tid) == 0 && offsetof(struct tp_ftp_ring, pid) == 4,
	       "a ring's owner is one aligned word");

struct tp_ftp_ring *tp_ag_ring_own(const struct tp_ag_rings *rs, struct tp_ag_writer *w)
{
	if (w->ring == -1) {
		w->ring = -2;
		if (!w->tid)
			w->tid = (int32_t)tp_raw0(SYS_gettid);
		for (int pass = 0; pass < 2 && w->ring < 0; pass++) {
			for (uint32_t i = 0; i < rs->n; i++) {
				owner_t *o = (owner_t *)(void *)&rs->rings[i].tid;
				uint64_t cur = __atomic_load_n(o, __ATOMIC_ACQUIRE);
				int32_t tid = (int32_t)(uint32_t)cur, pid = (int32_t)(cur >> 32);
				uint64_t me = (uint32_t)w->tid | (uint64_t)(uint32_t)rs->pid << 32;

				if (pass
					? tp_raw3(SYS_tgkill, pid ? pid : rs->pid, tid, 0) != -ESRCH
					: tid != 0)
					continue;
				if (__atomic_compare_exchange_n(o, &cur, me, 0, __ATOMIC_ACQ_REL,
								__ATOMIC_RELAXED)) {
					w->ring = (int32_t)i;
					w->tail =
					    __atomic_load_n(&rs->rings[i].tail, __ATOMIC_ACQUIRE);
					break;
				}
			}
		}
	}
	return w->ring < 0 ? NULL : &rs->rings[w->ring];
}

/* Wait for tracepad to drain ring @r, whose tail was @tail: on its futex, which tracepad
 * wakes once it moved the tail (the thread's CPU time is not spent spinning).  -1 when
 * tracepad is gone. */
static int wait_room(const struct tp_ag_rings *rs, struct tp_ftp_ring *r, uint64_t tail)
{
	struct timespec ts = {0, WAIT_NS};

	/* either tracepad sees waiting set after moving the tail, or this sees the tail moved */
	__atomic_store_n(&r->waiting, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&r->tail, __ATOMIC_SEQ_CST) != tail)
		return 0;
	if (tp_raw4(SYS_futex, &r->waiting, FUTEX_WAIT, 1, &ts) == -ETIMEDOUT && rs->gone())
		return -1;
	return 0;
}

uint8_t *tp_ag_ring_reserve(const struct tp_ag_rings *rs, struct tp_ag_writer *w, uint32_t need,
			    struct tp_ftp_ring **rp)
{
	uint32_t size = rs->size;
	struct tp_ftp_ring *r;
	uint64_t head, pos, fill;

	if (w->ring < 0 || need > size / 2)
		return NULL;
	r = &rs->rings[w->ring];
	head = r->head;
	pos = head & (size - 1);
	fill = pos + need > size ? size - pos : 0;
	for (unsigned looks = 0; size - (head - w->tail) < fill + need; looks++) {
		if (looks && wait_room(rs, r, w->tail))
			return NULL;
		w->tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
	}
	if (fill) {
		struct tp_ftp_rec *f =
		    (struct tp_ftp_rec *)(rs->data + (uint64_t)w->ring * size + pos);

		f->size = (uint32_t)fill;
		f->tp = TP_FTP_REC_FILL;
		head += fill;
		__atomic_store_n(&r->head, head, __ATOMIC_RELEASE);
		pos = 0;
	}
	*rp = r;
	return rs->data + (uint64_t)w->ring * size + pos;
}
