/* SSOL areas: RX mappings near the breakpoints they serve, found in a free gap of the
 * address space and mapped by syscall injection; the return trampoline sits in one. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "base/log.h"
#include "base/procfs.h"
#include "bp/bp-priv.h"
#include "proc/inject.h"

static int64_t dist(uint64_t a, uint64_t b)
{
	return a > b ? (int64_t)(a - b) : (int64_t)(b - a);
}

static bool area_reaches(uint64_t base, uint64_t addr)
{
	return dist(base, addr) < REACH - 2 * AREA_SIZE &&
	       dist(base + AREA_SIZE, addr) < REACH - 2 * AREA_SIZE;
}

/* The free gap nearest to @addr that can hold an area within reach, fed one mapping at a
 * time in address order, then once with start = end = hi_limit. */
struct gap_pick {
	uint64_t addr, prev_end, best;
	int64_t best_d;
};

static const uint64_t gap_lo_limit = 0x10000, gap_hi_limit = 0x7ffffffff000ULL;

static void gap_next(struct gap_pick *g, uint64_t start, uint64_t end)
{
	uint64_t cand, addr = g->addr;

	if (start > g->prev_end && start - g->prev_end >= AREA_SIZE) {
		/* Take the end of the gap nearest to @addr. */
		if (addr >= start)
			cand = start - AREA_SIZE;
		else
			cand = g->prev_end;
		/* Below the object is preferred: right above it is where brk grows. */
		int64_t d = dist(cand, addr) + (cand > addr ? REACH / 2 : 0);

		if (area_reaches(cand, addr) && d < g->best_d) {
			g->best = cand;
			g->best_d = d;
		}
	}
	if (end > g->prev_end)
		g->prev_end = end;
}

static int gap_map(void *arg, const struct tp_maps_ent *e)
{
	if (e->start < gap_hi_limit)
		gap_next(arg, e->start, e->end);
	return 0;
}

static int pick_gap(pid_t pid, uint64_t addr, uint64_t *out)
{
	struct gap_pick g = {.addr = addr, .prev_end = gap_lo_limit, .best_d = INT64_MAX};
	int err = tp_maps_foreach(pid, gap_map, &g);

	if (err)
		return err;
	gap_next(&g, gap_hi_limit, gap_hi_limit);
	if (!g.best)
		return -ENOMEM;
	*out = g.best;
	return 0;
}

struct area *tp_bp_area_for(struct tp_bps *b, pid_t tid, uint64_t addr, int *err)
{
	uint64_t args[6], base = 0;
	struct area *a;
	int64_t ret;

	tp_bp_left_scan(b);
	for (unsigned i = 0; i < b->nareas; i++) {
		a = &b->areas[i];
		if (a->used < AREA_SIZE / SLOT_SIZE && area_reaches(a->base, addr))
			return a;
	}
	*err = pick_gap(b->pid, addr, &base);
	if (*err)
		return NULL;
	/* RX for the tracee; tracepad fills it through /proc/PID/mem. */
	args[0] = base;
	args[1] = AREA_SIZE;
	args[2] = PROT_READ | PROT_EXEC;
	args[3] = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
	args[4] = (uint64_t)-1;
	args[5] = 0;
	*err = tp_proc_inject_syscall(b->p, b->pid, tid, SYS_mmap, args, &ret);
	if (*err)
		return NULL;
	if (ret < 0 && ret > -4096) {
		*err = (int)ret;
		return NULL;
	}
	if ((uint64_t)ret != base) {
		*err = -ENOMEM;
		return NULL;
	}
	struct ssol_head head = {.magic = SSOL_MAGIC};

	a = realloc(b->areas, (b->nareas + 1) * sizeof(*a));
	*err = a ? tp_proc_write(b->pid, base, &head, sizeof(head)) : -ENOMEM;
	if (*err) {
		if (a)
			b->areas = a;
		tp_bp_unmap(b, tid, base, AREA_SIZE);
		return NULL;
	}
	b->areas = a;
	a = &b->areas[b->nareas++];
	*a = (struct area){.base = base, .used = 1}; /* slot 0 holds the signature */
	return a;
}

/* ---- areas left by an earlier attach ---- */

struct left_scan {
	uint64_t rx[LEFT_MAX][2]; /* anonymous r-x mappings */
	unsigned nrx;
	uint64_t stubs_code;  /* where an r-x mapping ends and an rw- one begins */
	uint64_t prev_rx_end; /* end of the last anonymous r-x mapping */
};

static int left_map(void *arg, const struct tp_maps_ent *e)
{
	struct left_scan *ls = arg;
	bool anon = !e->path_len;

	if (anon && !strcmp(e->perms, "rw-p") && e->start == ls->prev_rx_end &&
	    e->end - e->start >= ASYNC_SIZE - ASYNC_CODE && !ls->stubs_code)
		ls->stubs_code = e->start;
	ls->prev_rx_end = 0;
	if (!anon || strcmp(e->perms, "r-xp"))
		return 0;
	ls->prev_rx_end = e->end;
	if (ls->nrx < LEFT_MAX) {
		ls->rx[ls->nrx][0] = e->start;
		ls->rx[ls->nrx++][1] = e->end;
	}
	return 0;
}

/* Adopt the SSOL area at @base if it has the signature: slots in use up to the last
 * non-zero one (slots are handed out in order and never wiped). */
static void adopt_ssol(struct tp_bps *b, uint64_t base, uint8_t *buf)
{
	const struct ssol_head *h = (const void *)buf;
	struct area *a;
	unsigned used;

	for (unsigned i = 0; i < b->nareas; i++)
		if (b->areas[i].base == base)
			return;
	/* The signature first: most anonymous r-x memory is a JIT's. */
	if (tp_proc_read(b->pid, base, buf, sizeof(*h)) != sizeof(*h) ||
	    memcmp(h->magic, SSOL_MAGIC, sizeof(SSOL_MAGIC)) ||
	    tp_proc_read(b->pid, base, buf, AREA_SIZE) != AREA_SIZE)
		return;
	for (used = AREA_SIZE / SLOT_SIZE; used > 1; used--) {
		const uint8_t *slot = buf + (used - 1) * SLOT_SIZE;
		unsigned k;

		for (k = 0; k < SLOT_SIZE && !slot[k]; k++)
			;
		if (k < SLOT_SIZE)
			break;
	}
	a = realloc(b->areas, (b->nareas + 1) * sizeof(*a));
	if (!a)
		return;
	b->areas = a;
	b->areas[b->nareas++] = (struct area){.base = base, .used = used, .keep = h->hazard != 0};
	tp_dbg("bp: %d: reusing the SSOL area at 0x%llx (%u slots used%s)", b->pid,
	       (unsigned long long)base, used, h->hazard ? ", kept" : "");
}

void tp_bp_left_scan(struct tp_bps *b)
{
	struct left_scan ls = {0};
	uint8_t *buf;

	if (b->left_scanned)
		return;
	b->left_scanned = true;
	if (tp_maps_foreach(b->pid, left_map, &ls))
		return;
	buf = malloc(AREA_SIZE);
	if (!buf)
		return;
	/* Neighbouring anonymous mappings of the same protection merge: areas are looked for
	 * at every AREA_SIZE step from both ends of a mapping. */
	for (unsigned i = 0; i < ls.nrx; i++) {
		uint64_t lo = ls.rx[i][0], hi = ls.rx[i][1];

		if (hi == ls.stubs_code && hi - lo >= ASYNC_CODE) {
			struct stubs_head h;

			if (tp_proc_read(b->pid, hi - ASYNC_CODE, &h, sizeof(h)) == sizeof(h) &&
			    !memcmp(h.magic, STUBS_MAGIC, sizeof(STUBS_MAGIC)))
				b->left_stubs = hi - ASYNC_CODE;
			if (b->left_stubs)
				hi -= ASYNC_CODE;
		}
		for (uint64_t k = 0; k < LEFT_MAX && lo + (k + 1) * AREA_SIZE <= hi; k++) {
			adopt_ssol(b, lo + k * AREA_SIZE, buf);
			adopt_ssol(b, hi - (k + 1) * AREA_SIZE, buf);
		}
	}
	free(buf);
}

int tp_bp_areas_leave(struct tp_bps *b, pid_t tid)
{
	struct ssol_head head = {.magic = SSOL_MAGIC, .hazard = 1};
	int r, err = 0;

	for (unsigned i = 0; i < b->nareas; i++) {
		if (b->keep_areas)
			r = tp_proc_write(b->pid, b->areas[i].base, &head, sizeof(head));
		else if (!b->areas[i].keep && tid)
			r = tp_bp_unmap(b, tid, b->areas[i].base, AREA_SIZE);
		else
			r = 0;
		if (r && !err)
			err = r;
	}
	b->nareas = 0;
	return err;
}

int tp_bp_make_tramp(struct tp_bps *b, pid_t tid, uint64_t near)
{
	struct area *a;
	uint64_t at;
	int r;

	a = tp_bp_area_for(b, tid, near, &r);
	if (!a)
		return r;
	at = a->base + (uint64_t)a->used * SLOT_SIZE;
	r = tp_proc_poke_int3(b->pid, at, true, 0);
	if (r)
		return r;
	a->used++;
	b->tramp = at;
	return 0;
}

/* Unmap [@base, +@len) of the process by injection into stopped task @tid. */
int tp_bp_unmap(struct tp_bps *b, pid_t tid, uint64_t base, uint64_t len)
{
	uint64_t args[6] = {base, len};
	int64_t ret;
	int r = tp_proc_inject_syscall(b->p, b->pid, tid, SYS_munmap, args, &ret);

	return r ? r : (int)ret;
}

/* The breakpoint whose slot holds @pc, or NULL. */
struct bp *tp_bp_in_slot(struct tp_bps *b, uint64_t pc)
{
	for (unsigned i = 0; i < b->npool; i++) {
		struct bp *bp = &b->pool[i];

		if (bp->addr && pc >= bp->slot && pc < bp->slot + SLOT_SIZE)
			return bp;
	}
	return NULL;
}

bool tp_bp_in_areas(struct tp_bps *b, uint64_t pc)
{
	if (tp_bp_in_stubs(b, pc))
		return true;
	for (unsigned i = 0; i < b->nareas; i++)
		if (pc >= b->areas[i].base && pc < b->areas[i].base + AREA_SIZE)
			return true;
	return false;
}
