/* SSOL areas: RX mappings near the breakpoints they serve, found in a free gap of the
 * address space and mapped by syscall injection; the return trampoline sits in one. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>

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
	a = realloc(b->areas, (b->nareas + 1) * sizeof(*a));
	if (!a) {
		*err = -ENOMEM;
		return NULL;
	}
	b->areas = a;
	a = &b->areas[b->nareas++];
	a->base = base;
	a->used = 0;
	return a;
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
	r = tp_bp_poke(b->pid, at, true, 0);
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
	for (unsigned i = 0; i < b->cap; i++) {
		struct bp *bp = &b->tab[i];

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
