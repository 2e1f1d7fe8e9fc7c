/* The debug registers as gdb writes and reads them (PEEKUSER/POKEUSER of u_debugreg).  Data
 * watchpoints pass through: they watch data, whose addresses are the program's in the cache
 * too.  An execute breakpoint (`hbreak`) would never fire there, the program's own code never
 * runs: it is kept out of the real DR7 and becomes a breakpoint of the repository (the seed's
 * Write Register for those registers: a breakpoint in every cache copy), whose hit engine.c
 * shows as the debug register's (TRAP_HWBKPT, its DR6 bit, the pc on the instruction). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>

#include "dbt/map.h"
#include "debug/engine-priv.h"

#define DR_OFF offsetof(struct user, u_debugreg)
#define DR_THREADS 512

/* what gdb wrote into a thread's DR0-3 and DR7, and the DR6 bits of a hit it was shown */
static struct {
	pid_t tid; /* 0: free */
	struct dproc *pr;
	uint64_t addr[4], dr7;
	unsigned hit;
} dt[DR_THREADS];

static int dt_find(pid_t tid, bool add)
{
	int free_at = -1;

	for (int i = 0; i < DR_THREADS; i++) {
		if (dt[i].tid == tid)
			return i;
		if (!dt[i].tid && free_at < 0)
			free_at = i;
	}
	if (!add || free_at < 0)
		return -1;
	memset(&dt[free_at], 0, sizeof(dt[free_at]));
	dt[free_at].tid = tid;
	return free_at;
}

/* Slot @i of DR7 @v: enabled (L or G) and an execute breakpoint (R/W 00, length 00). */
static bool exec_slot(uint64_t v, int i)
{
	return (v >> (2 * i) & 3) && !(v >> (16 + 4 * i) & 15);
}

static bool has_addr(const uint64_t *a, unsigned n, uint64_t pc)
{
	for (unsigned i = 0; i < n; i++)
		if (a[i] == pc)
			return true;
	return false;
}

bool tp_debug_sw_bp_at(const struct dproc *pr, uint64_t pc)
{
	return has_addr(pr->sw, pr->nsw, pc);
}

bool tp_debug_hw_bp_at(const struct dproc *pr, uint64_t pc)
{
	return has_addr(pr->hw, pr->nhw, pc);
}

/* The process's execute breakpoints are those of any of its threads' registers (gdb gives
 * every thread the same, one thread after the other): in the repository as they come and go,
 * unless gdb has a breakpoint of its own there. */
static void hw_update(struct dproc *pr)
{
	uint64_t now[TP_DEBUG_MAX_HW];
	unsigned n = 0;

	for (int i = 0; i < DR_THREADS; i++)
		for (int s = 0; dt[i].tid && dt[i].pr == pr && s < 4; s++)
			if (exec_slot(dt[i].dr7, s) && !has_addr(now, n, dt[i].addr[s]) &&
			    n < TP_DEBUG_MAX_HW)
				now[n++] = dt[i].addr[s];
	for (unsigned i = 0; i < pr->nhw; i++)
		if (!has_addr(now, n, pr->hw[i]) && !tp_debug_sw_bp_at(pr, pr->hw[i]))
			tp_dbt_map_bp_remove(pr->map, pr->hw[i]);
	for (unsigned i = 0; i < n; i++)
		if (!has_addr(pr->hw, pr->nhw, now[i]) && !tp_debug_sw_bp_at(pr, now[i]))
			tp_dbt_map_bp_insert(pr->map, now[i]);
	memcpy(pr->hw, now, n * sizeof(now[0]));
	pr->nhw = n;
}

bool tp_debug_dr_peek(struct dproc *pr, pid_t tid, unsigned long off, long *ret)
{
	int i = dt_find(tid, false), r = (int)((off - DR_OFF) / 8);

	if (off < DR_OFF || off >= DR_OFF + 64 || (off & 7) || !pr->map)
		return false;
	if (r == 7 && i >= 0) {
		errno = 0;
		*ret = (long)dt[i].dr7;
		return true;
	}
	if (r != 6 || i < 0 || !dt[i].hit)
		return false;
	*ret = ptrace(PTRACE_PEEKUSER, tid, (void *)off, 0);
	if (*ret != -1 || !errno)
		*ret |= (long)dt[i].hit;
	return true;
}

bool tp_debug_dr_poke(struct dproc *pr, pid_t tid, unsigned long off, unsigned long v, long *ret)
{
	int r = (int)((off - DR_OFF) / 8), i;
	uint64_t real = v;

	if (off < DR_OFF || off >= DR_OFF + 64 || (off & 7) || !pr->map ||
	    (i = dt_find(tid, true)) < 0)
		return false;
	dt[i].pr = pr;
	if (r < 4)
		dt[i].addr[r] = v;
	if (r == 6)
		dt[i].hit = 0;
	if (r != 7)
		return false; /* the real register too (DR0-3 hold only addresses) */
	/* the real DR7 without the execute breakpoints (their enable bits) */
	for (int s = 0; s < 4; s++)
		if (exec_slot(v, s))
			real &= ~(3ull << (2 * s));
	*ret = ptrace(PTRACE_POKEUSER, tid, (void *)off, (void *)(uintptr_t)real);
	if (!*ret) {
		int e = errno;

		dt[i].dr7 = v;
		hw_update(pr);
		errno = e;
	}
	return true;
}

unsigned tp_debug_dr_hit(pid_t tid, uint64_t pc)
{
	int i = dt_find(tid, false);
	unsigned bits = 0;

	for (int s = 0; i >= 0 && s < 4; s++)
		if (exec_slot(dt[i].dr7, s) && dt[i].addr[s] == pc)
			bits |= 1u << s;
	return bits;
}

void tp_debug_dr_shown(pid_t tid, unsigned bits)
{
	int i = dt_find(tid, false);

	if (i >= 0)
		dt[i].hit = bits;
}

void tp_debug_dr_thread_gone(pid_t tid)
{
	int i = dt_find(tid, false);

	if (i >= 0)
		dt[i].tid = 0;
}

void tp_debug_dr_forget(struct dproc *pr, bool remove)
{
	for (int i = 0; i < DR_THREADS; i++)
		if (dt[i].tid && dt[i].pr == pr)
			dt[i].tid = 0;
	/* the kernel clears a tracer's debug registers at its detach: the process runs on
	 * without them */
	for (unsigned i = 0; remove && i < pr->nhw; i++)
		if (!tp_debug_sw_bp_at(pr, pr->hw[i]))
			tp_dbt_map_bp_remove(pr->map, pr->hw[i]);
	pr->nhw = 0;
	free(pr->sw);
	pr->sw = NULL;
	pr->nsw = pr->capsw = 0;
}

int tp_debug_sw_note(struct dproc *pr, uint64_t pc, bool set)
{
	if (!set) {
		for (size_t i = 0; i < pr->nsw; i++)
			if (pr->sw[i] == pc)
				pr->sw[i] = pr->sw[--pr->nsw];
		return 0;
	}
	if (tp_debug_sw_bp_at(pr, pc))
		return 0;
	if (pr->nsw == pr->capsw) {
		size_t cap = pr->capsw ? 2 * pr->capsw : 64;
		uint64_t *more = realloc(pr->sw, cap * sizeof(*more));

		if (!more)
			return -ENOMEM;
		pr->sw = more;
		pr->capsw = cap;
	}
	pr->sw[pr->nsw++] = pc;
	return 0;
}
