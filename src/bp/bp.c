/* Breakpoints with SSOL slots (after Functracer and kprobes' instruction pages): the int3
 * stays in the text, the displaced instruction runs from a slot followed by a jmp back, so
 * a hit is one stop (pc := slot) and no thread can slip past a lifted breakpoint. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#include "arch/arch.h"
#include "bp/bp.h"
#include "base/log.h"
#include "base/procfs.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define AREA_SIZE (64 * 1024)
#define SLOT_SIZE 64
#define REACH ((int64_t)1 << 31)

/* Returns without a stop: ASYNC_SLOTS return stubs, then as many records, in one mapping
 * anywhere in the address space (stubs reach their records RIP-relative). */
#define ASYNC_SLOTS 4096
#define STUB_SIZE 128
#define STUB_CHUNK 64 /* stubs written at a time */
#define ASYNC_CODE ((uint64_t)ASYNC_SLOTS * STUB_SIZE)
#define ASYNC_SIZE (ASYNC_CODE + (uint64_t)ASYNC_SLOTS * TP_RSTUB_REC_SIZE)
#define REAP_MAX 1023 /* records read at once (with one more word: IOV_MAX) */

struct area {
	uint64_t base;
	unsigned used; /* slots handed out */
};

struct bp {
	uint64_t addr; /* 0: empty table entry */
	uint64_t slot;
	uint64_t hits;
	bool ret;	  /* TP_BP_RETURN */
	uint8_t len;	  /* of the original instruction */
	uint8_t slot_len; /* relocated copy, without the jmp back */
	uint8_t orig[TP_ARCH_MAX_INSN_LEN];
};

struct tp_bps {
	struct tp_proc *p;
	pid_t pid;
	struct bp *tab; /* open addressing on addr */
	unsigned cap, n;
	struct area *areas;
	unsigned nareas;
	struct tp_event *q; /* events deferred while waiting for one task */
	unsigned qhead, qlen, qcap;
	uint64_t tramp; /* shared return trampoline (an int3 in a slot), 0 until needed */
	struct shadow *sh;
	unsigned nsh;
	/* Returns without a stop (tp_bps_set_async()). */
	tp_bp_return_fn ret_fn;
	void *ret_arg;
	int64_t errno_tpoff;
	bool errno_known;
	bool async_failed; /* no mapping for the stubs: every return stops */
	bool keep_areas;   /* a thread may still be in a slot, or return to one: never unmap */
	uint64_t amap;	   /* the stubs' mapping, 0 until needed */
	unsigned anext;	   /* stubs written so far */
	uint32_t *afree;   /* slots free again (capacity ASYNC_SLOTS) */
	unsigned nafree;
	struct quarantined *aquar; /* slots of frames dropped while hooked */
	unsigned naquar;
	uint8_t (*rbuf)[TP_RSTUB_REC_SIZE]; /* REAP_MAX records */
};

/* The slot of a frame dropped while its stub was still its return address: it could still
 * return through it (a stack switch), so the slot is only reused once its call is done or
 * the stack holds neither the stub's address nor the real one there (quarantine_sweep()). */
struct quarantined {
	uint64_t sp, ret;
	uint32_t slot;
};

/* A hooked call in flight: the return address it replaced at @sp.  While unhooked (an
 * unwinder runs in the thread), the real return address is back in place. */
struct frame {
	uint64_t sp, ret, func;
	int32_t slot; /* its return stub (returns without a stop), or -1: the trampoline */
	bool unhooked;
	bool borrowed; /* a vfork child's copy of its parent's frame: the slot is the parent's */
};

/* Frames dropped as unwound are kept a while: should one of them return after all (a stack
 * switch fooled the stack-pointer test), its return address is still known. */
#define GRAVE 32

/* Per-thread shadow stack of hooked calls (few threads: searched linearly). */
struct shadow {
	pid_t tid;
	struct frame *f;
	unsigned n, cap;
	struct frame grave[GRAVE];
	unsigned ngrave;   /* total dropped, the last GRAVE kept */
	uint64_t errno_fs; /* the thread pointer its errno was checked readable for */
	bool errno_ok;
};

struct tp_bps *tp_bps_new(struct tp_proc *p, pid_t pid)
{
	struct tp_bps *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->p = p;
	b->pid = pid;
	b->cap = 64;
	b->tab = calloc(b->cap, sizeof(*b->tab));
	if (!b->tab) {
		free(b);
		errno = ENOMEM;
		return NULL;
	}
	return b;
}

void tp_bps_free(struct tp_bps *bps)
{
	if (!bps)
		return;
	free(bps->tab);
	free(bps->areas);
	free(bps->q);
	for (unsigned i = 0; i < bps->nsh; i++)
		free(bps->sh[i].f);
	free(bps->sh);
	free(bps->afree);
	free(bps->aquar);
	free(bps->rbuf);
	free(bps);
}

/* ---- deferred events ---- */

static int defer(struct tp_bps *b, const struct tp_event *ev)
{
	if (b->qlen == b->qcap) {
		unsigned ncap = b->qcap ? 2 * b->qcap : 16;
		struct tp_event *n = malloc(ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (unsigned i = 0; i < b->qlen; i++)
			n[i] = b->q[(b->qhead + i) % b->qcap];
		free(b->q);
		b->q = n;
		b->qcap = ncap;
		b->qhead = 0;
	}
	b->q[(b->qhead + b->qlen) % b->qcap] = *ev;
	b->qlen++;
	return 0;
}

/* Hand the events deferred during one operation back to the event loop, in order. */
static void flush_deferred(struct tp_bps *b)
{
	while (b->qlen) {
		tp_proc_requeue(b->p, &b->q[b->qhead]);
		b->qhead = (b->qhead + 1) % b->qcap;
		b->qlen--;
	}
}

int tp_bp_wait(struct tp_bps *bps, struct tp_event *ev)
{
	return tp_proc_wait(bps->p, ev);
}

/* The operations of this module finish before the caller sees its own signals. */
static int wait_one(struct tp_proc *p, struct tp_event *ev)
{
	int r;

	while ((r = tp_proc_wait(p, ev)) == -EINTR)
		;
	return r;
}

/* After a signal stop of @tid, held back by an operation of this module: resume it as the
 * operation does.  The stop may be one reported before the operation resumed @tid (a
 * signal that came as tracepad attached, queued since): @tid then runs already, and goes on
 * to the stop the operation waits for. */
static int resume_unless_running(struct tp_bps *b, pid_t tid, enum tp_resume how)
{
	int r = tp_proc_resume(b->p, tid, how, 0);

	return r == -EBUSY ? 0 : r;
}

static int step_once(struct tp_bps *b, pid_t tid, int *held);

/* Step @tid once and wait for its stop; other tasks' events are deferred.  A signal for
 * @tid is held back into *@held (the step is retried). */
static int step_one(struct tp_bps *b, pid_t tid, int *held)
{
	/* Signals that a step can raise stay as they were (blocking one would turn a fault
	 * into a kill); the others wait until the step is done: a timer signal every 100 us
	 * could otherwise come before every attempt at the step. */
	const uint64_t sync = 1ULL << (SIGSEGV - 1) | 1ULL << (SIGBUS - 1) | 1ULL << (SIGILL - 1) |
			      1ULL << (SIGFPE - 1) | 1ULL << (SIGTRAP - 1) | 1ULL << (SIGSYS - 1);
	uint64_t mask;
	bool masked = !tp_proc_get_sigmask(tid, &mask) && !tp_proc_set_sigmask(tid, mask | ~sync);
	int r = step_once(b, tid, held);

	if (masked && r != -ESRCH)
		tp_proc_set_sigmask(tid, mask);
	return r;
}

/* One attempt at the step, retried after each signal stop that comes first. */
static int step_once(struct tp_bps *b, pid_t tid, int *held)
{
	struct tp_event ev;
	int nsig = 0;
	int r = tp_proc_resume(b->p, tid, TP_RESUME_STEP, 0);

	if (r)
		return r;
	for (;;) {
		r = wait_one(b->p, &ev);
		if (r)
			return r;
		if (ev.tid != tid) {
			r = defer(b, &ev);
			if (r)
				return r;
			continue;
		}
		switch (ev.kind) {
		case TP_EV_STEP:
			return 0;
		case TP_EV_EXITED:
		case TP_EV_EXIT:
			defer(b, &ev);
			return -ESRCH;
		case TP_EV_SIGNAL:
			/* The signal stop came before the step ran: step again. */
			{
				uint64_t dpc = 0;

				tp_proc_get_pc(tid, &dpc);
				tp_dbg(
				    "bp: step of %d at 0x%llx: signal %d (code %d, addr %p) held",
				    tid, (unsigned long long)dpc, ev.sig, ev.si.si_code,
				    ev.si.si_addr);
			}
			if (++nsig > 16)
				return -EIO;
			*held = ev.sig;
			r = resume_unless_running(b, tid, TP_RESUME_STEP);
			if (r)
				return r;
			continue;
		default:
			/* A breakpoint or other trap reached by the stepped instruction. */
			return ev.kind == TP_EV_BREAKPOINT ? 0 : -EIO;
		}
	}
}

/* ---- injection ---- */

/* Run @tid to its next syscall stop; other tasks' events are deferred, a signal for @tid
 * held back into *@held. */
static int syscall_stop(struct tp_bps *b, pid_t tid, int *held)
{
	struct tp_event ev;
	int r = tp_proc_resume(b->p, tid, TP_RESUME_SYSCALL, 0);

	while (!r) {
		r = wait_one(b->p, &ev);
		if (r)
			break;
		if (ev.tid != tid) {
			r = defer(b, &ev);
			continue;
		}
		switch (ev.kind) {
		case TP_EV_SYSCALL:
			return 0;
		case TP_EV_SIGNAL:
			*held = ev.sig;
			r = resume_unless_running(b, tid, TP_RESUME_SYSCALL);
			break;
		case TP_EV_EXIT:
		case TP_EV_EXITED:
			defer(b, &ev);
			return -ESRCH;
		default:
			return -EIO;
		}
	}
	return r;
}

int tp_bp_inject_syscall(struct tp_bps *bps, pid_t tid, long nr, const uint64_t args[6],
			 int64_t *ret)
{
	static const uint8_t insn[2] = {0x0f, 0x05};
	struct user_regs_struct saved, regs, inj;
	uint8_t orig[2];
	uint64_t at;
	int r, r2, held = 0;

	r = tp_proc_auxv(bps->pid, AT_ENTRY, &at);
	if (r)
		return r;
	r = tp_proc_get_regs(tid, &saved);
	if (r)
		return r;
	if (tp_proc_read(bps->pid, at, orig, sizeof(orig)) != sizeof(orig))
		return -EIO;
	r = tp_proc_write(bps->pid, at, insn, sizeof(insn));
	if (r)
		return r;
	regs = saved;
	regs.rip = at;
	regs.rax = nr;
	regs.rdi = args[0];
	regs.rsi = args[1];
	regs.rdx = args[2];
	regs.r10 = args[3];
	regs.r8 = args[4];
	regs.r9 = args[5];
	/* No syscall restart on the way out of this stop: the injected syscall is not one. */
	regs.orig_rax = -1;
	inj = regs;
	/* Syscall stops, not a single-step: a step's trap, like an int3's, resets an ignored
	 * or blocked SIGTRAP to SIG_DFL.  A task stopped inside a syscall (the exec stop of a
	 * launched program) first reports that syscall's exit: other syscalls' stops are
	 * passed over until the entry and exit of ours. */
	r = tp_proc_set_regs(tid, &inj);
	for (int seen = 0, other = 0; !r && seen < 2;) {
		r = syscall_stop(bps, tid, &held);
		if (!r)
			r = tp_proc_get_regs(tid, &regs);
		if (r)
			break;
		if (regs.rip == at + sizeof(insn) && (long)regs.orig_rax == nr)
			seen++;
		else /* that syscall's exit wrote its result over our registers */
			r = ++other > 2 ? -EIO : tp_proc_set_regs(tid, &inj);
	}
	if (!r)
		*ret = (int64_t)regs.rax;
	r2 = tp_proc_write(bps->pid, at, orig, sizeof(orig));
	if (r != -ESRCH) {
		/* Stopped inside an interrupted syscall (attached), the task was to restart it
		 * on its way out; from the syscall-exit stop it resumes at now, the kernel no
		 * longer would: restart it here, as the kernel does when no handler runs. */
		long rv = (long)saved.rax;

		if ((long)saved.orig_rax >= 0 &&
		    (rv == -512 || rv == -513 || rv == -514 || rv == -516)) {
			saved.rax = rv == -516 ? SYS_restart_syscall : saved.orig_rax;
			saved.rip -= sizeof(insn);
		}
		int r3 = tp_proc_set_regs(tid, &saved);

		if (!r2)
			r2 = r3;
	}
	if (held)
		syscall(SYS_tgkill, bps->pid, tid, held);
	flush_deferred(bps);
	return r ? r : r2;
}

/* ---- SSOL areas ---- */

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

static struct area *area_for(struct tp_bps *b, pid_t tid, uint64_t addr, int *err)
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
	*err = tp_bp_inject_syscall(b, tid, SYS_mmap, args, &ret);
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

/* ---- the table ---- */

static unsigned hash(uint64_t addr, unsigned cap)
{
	return (unsigned)((addr * 0x9e3779b97f4a7c15ULL) >> 32) & (cap - 1);
}

static struct bp *find(struct tp_bps *b, uint64_t addr)
{
	for (unsigned i = hash(addr, b->cap);; i = (i + 1) & (b->cap - 1)) {
		if (b->tab[i].addr == addr)
			return &b->tab[i];
		if (!b->tab[i].addr)
			return NULL;
	}
}

static struct bp *add(struct tp_bps *b, uint64_t addr)
{
	unsigned i;

	if (2 * (b->n + 1) > b->cap) {
		unsigned ncap = 2 * b->cap;
		struct bp *n = calloc(ncap, sizeof(*n));

		if (!n)
			return NULL;
		for (unsigned k = 0; k < b->cap; k++) {
			if (!b->tab[k].addr)
				continue;
			for (i = hash(b->tab[k].addr, ncap); n[i].addr; i = (i + 1) & (ncap - 1))
				;
			n[i] = b->tab[k];
		}
		free(b->tab);
		b->tab = n;
		b->cap = ncap;
	}
	for (i = hash(addr, b->cap); b->tab[i].addr; i = (i + 1) & (b->cap - 1))
		;
	b->n++;
	b->tab[i].addr = addr;
	return &b->tab[i];
}

/* ---- breakpoints ---- */

static int make_tramp(struct tp_bps *b, pid_t tid, uint64_t near)
{
	static const uint8_t int3 = 0xcc;
	struct area *a;
	uint64_t at;
	int r;

	a = area_for(b, tid, near, &r);
	if (!a)
		return r;
	at = a->base + (uint64_t)a->used * SLOT_SIZE;
	r = tp_proc_write(b->pid, at, &int3, 1);
	if (r)
		return r;
	a->used++;
	b->tramp = at;
	return 0;
}

int tp_bp_insert(struct tp_bps *bps, pid_t tid, uint64_t addr, unsigned flags)
{
	uint8_t buf[TP_ARCH_MAX_INSN_LEN], slot[SLOT_SIZE];
	static const uint8_t int3 = 0xcc;
	struct tp_insn insn;
	struct area *a;
	struct bp *bp;
	size_t rlen;
	ssize_t got;
	uint64_t at;
	int r;

	if (!addr)
		return -EINVAL;
	if (find(bps, addr))
		return -EEXIST;
	if ((flags & TP_BP_RETURN) && !bps->tramp) {
		r = make_tramp(bps, tid, addr);
		if (r)
			return r;
	}
	got = tp_proc_read(bps->pid, addr, buf, sizeof(buf));
	if (got <= 0)
		return got < 0 ? (int)got : -EFAULT;
	r = tp_arch_decode(buf, got, addr, &insn);
	if (r)
		return r;
	/* Instructions that would need emulation (syscall, int3, ...): tp_arch_relocate
	 * refuses them; none is found at a function entry, so they are refused here too
	 * rather than falling back to stop-the-world stepping. */
	a = area_for(bps, tid, addr, &r);
	if (!a)
		return r;
	at = a->base + (uint64_t)a->used * SLOT_SIZE;
	r = tp_arch_relocate(buf, insn.len, addr, at, slot, sizeof(slot) - 5, &rlen);
	if (r)
		return r;
	if (insn.kind != TP_INSN_JMP && insn.kind != TP_INSN_RET) {
		r = tp_arch_emit_jmp(slot + rlen, at + rlen, addr + insn.len);
		if (r)
			return r;
		r = tp_proc_write(bps->pid, at, slot, rlen + 5);
	} else {
		r = tp_proc_write(bps->pid, at, slot, rlen);
	}
	if (r)
		return r;
	bp = add(bps, addr);
	if (!bp)
		return -ENOMEM;
	a->used++;
	bp->slot = at;
	bp->ret = flags & TP_BP_RETURN;
	bp->len = insn.len;
	bp->slot_len = rlen;
	memcpy(bp->orig, buf, insn.len);
	/* The slot is complete before the int3 appears: a thread that hits it finds it ready. */
	r = tp_proc_write(bps->pid, addr, &int3, 1);
	/* On failure the entry stays: its original byte is still in place, and
	 * tp_bp_remove_all() writing it back is harmless. */
	return r;
}

static struct shadow *shadow_of(struct tp_bps *b, pid_t tid, bool create)
{
	struct shadow *n;

	for (unsigned i = 0; i < b->nsh; i++)
		if (b->sh[i].tid == tid)
			return &b->sh[i];
	if (!create)
		return NULL;
	n = realloc(b->sh, (b->nsh + 1) * sizeof(*n));
	if (!n)
		return NULL;
	b->sh = n;
	n = &b->sh[b->nsh++];
	memset(n, 0, sizeof(*n));
	n->tid = tid;
	return n;
}

static int shadow_reserve(struct shadow *s, unsigned n)
{
	if (n > s->cap) {
		unsigned ncap = s->cap ? 2 * s->cap : 64;
		struct frame *f;

		while (ncap < n)
			ncap *= 2;
		f = realloc(s->f, ncap * sizeof(*f));
		if (!f)
			return -ENOMEM;
		s->f = f;
		s->cap = ncap;
	}
	return 0;
}

/* Unmap [@base, +@len) of the process by injection into stopped task @tid. */
static int unmap(struct tp_bps *b, pid_t tid, uint64_t base, uint64_t len)
{
	uint64_t args[6] = {base, len};
	int64_t ret;
	int r = tp_bp_inject_syscall(b, tid, SYS_munmap, args, &ret);

	return r ? r : (int)ret;
}

/* ---- returns without a stop ---- */

static uint64_t stub_at(const struct tp_bps *b, uint32_t k)
{
	return b->amap + (uint64_t)k * STUB_SIZE;
}

static uint64_t rec_at(const struct tp_bps *b, uint32_t k)
{
	return b->amap + ASYNC_CODE + (uint64_t)k * TP_RSTUB_REC_SIZE;
}

/* What a frame's return address is while it is hooked. */
static uint64_t hook_of(const struct tp_bps *b, const struct frame *f)
{
	return f->slot >= 0 ? stub_at(b, (uint32_t)f->slot) : b->tramp;
}

static bool in_stubs(const struct tp_bps *b, uint64_t pc)
{
	return b->amap && pc >= b->amap && pc < b->amap + ASYNC_CODE;
}

/* The bookkeeping of the stubs: free list, quarantine, the buffer records are read into. */
static int async_alloc(struct tp_bps *b)
{
	b->afree = malloc(ASYNC_SLOTS * sizeof(*b->afree));
	b->aquar = malloc(ASYNC_SLOTS * sizeof(*b->aquar));
	b->rbuf = malloc(REAP_MAX * sizeof(*b->rbuf));
	return b->afree && b->aquar && b->rbuf ? 0 : -ENOMEM;
}

/* A stub no frame uses any more. */
static void slot_put(struct tp_bps *b, uint32_t slot)
{
	b->afree[b->nafree++] = slot;
}

/* Map the stubs' area (code RX, records RW) by injection into stopped task @tid. */
static int async_map(struct tp_bps *b, pid_t tid)
{
	uint64_t args[6] = {
	    0, ASYNC_SIZE, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0};
	int64_t ret;
	int r;

	r = async_alloc(b);
	if (r)
		return r;
	r = tp_bp_inject_syscall(b, tid, SYS_mmap, args, &ret);
	if (r)
		return r;
	if (ret < 0 && ret > -4096)
		return (int)ret;
	uint64_t pargs[6] = {(uint64_t)ret + ASYNC_CODE, ASYNC_SIZE - ASYNC_CODE,
			     PROT_READ | PROT_WRITE};
	int64_t pret;

	r = tp_bp_inject_syscall(b, tid, SYS_mprotect, pargs, &pret);
	if (r || pret) {
		unmap(b, tid, (uint64_t)ret, ASYNC_SIZE);
		return r ? r : (int)pret;
	}
	b->amap = (uint64_t)ret;
	return 0;
}

/* The next STUB_CHUNK stubs, written in one go. */
static int stubs_write(struct tp_bps *b)
{
	uint8_t code[STUB_CHUNK * STUB_SIZE];
	size_t len;
	int r;

	memset(code, 0xcc, sizeof(code));
	for (unsigned i = 0; i < STUB_CHUNK; i++) {
		r = tp_arch_emit_return_stub(code + i * STUB_SIZE, STUB_SIZE,
					     stub_at(b, b->anext + i), rec_at(b, b->anext + i),
					     &len);
		if (r)
			return r;
	}
	r = tp_proc_write(b->pid, stub_at(b, b->anext), code, sizeof(code));
	if (!r)
		b->anext += STUB_CHUNK;
	return r;
}

/* Quarantined slots whose call returned after all, or whose stack no longer holds their
 * stub's address (nor the real one the stub puts there as it returns), are free again. */
static void quarantine_sweep(struct tp_bps *b)
{
	struct tp_proc_piece pc[2 * 512];
	uint64_t words[512];
	uint32_t done[512];
	unsigned n = b->naquar < 512 ? b->naquar : 512, keep = 0;

	for (unsigned i = 0; i < n; i++) {
		pc[2 * i] = (struct tp_proc_piece){b->aquar[i].sp, &words[i], 8};
		pc[2 * i + 1] = (struct tp_proc_piece){rec_at(b, b->aquar[i].slot), &done[i], 4};
	}
	if (!n)
		return;
	if (tp_proc_read_pieces(b->pid, pc, 2 * n)) {
		/* Some stack is gone (its thread exited): nothing returns through it. */
		for (unsigned i = 0; i < n; i++) {
			done[i] = 0;
			if (tp_proc_read(b->pid, pc[2 * i].addr, &words[i], 8) != 8)
				words[i] = 0;
		}
	}
	for (unsigned i = 0; i < b->naquar; i++) {
		/* Not while the stub may be running: it pushed the real return address in
		 * place of its own but has not set "done" yet. */
		if (i < n && (done[i] || (words[i] != stub_at(b, b->aquar[i].slot) &&
					  words[i] != b->aquar[i].ret)))
			slot_put(b, b->aquar[i].slot);
		else
			b->aquar[keep++] = b->aquar[i];
	}
	b->naquar = keep;
}

/* A free slot for a new frame of stopped task @tid, -1 when there is none. */
static int32_t slot_get(struct tp_bps *b, pid_t tid)
{
	if (b->async_failed)
		return -1;
	if (!b->amap && async_map(b, tid)) {
		tp_dbg("bp: no area for return stubs in %d: every return stops", b->pid);
		b->async_failed = true;
		return -1;
	}
	if (!b->nafree && b->anext < ASYNC_SLOTS && stubs_write(b))
		return -1;
	if (!b->nafree && b->anext < ASYNC_SLOTS) {
		/* Fresh stubs: handed out in order, the last written first. */
		for (unsigned i = 0; i < STUB_CHUNK; i++)
			slot_put(b, b->anext - 1 - i);
	}
	if (!b->nafree)
		quarantine_sweep(b);
	return b->nafree ? (int32_t)b->afree[--b->nafree] : -1;
}

static void drop_top(struct tp_bps *b, struct shadow *s)
{
	struct frame *f = &s->f[--s->n];

	s->grave[s->ngrave++ % GRAVE] = *f;
	if (f->slot < 0 || f->borrowed)
		return;
	if (f->unhooked)
		slot_put(b, (uint32_t)f->slot);
	else
		b->aquar[b->naquar++] = (struct quarantined){f->sp, f->ret, (uint32_t)f->slot};
}

/* Report the calls of thread @tid that returned through their stubs, innermost first,
 * taking their frames off: from the top of the shadow stack, as long as they did.  With
 * @strict, @limit is the thread's stack pointer, and a frame below it that did not return
 * was unwound (dropped).  @running: the thread may be inside a stub right now (records
 * are read twice).  Also reads the word at @word_at into *@word (0: none). */
static int reap(struct tp_bps *b, pid_t tid, struct shadow *s, uint64_t limit, bool strict,
		bool running, uint64_t word_at, uint64_t *word)
{
	struct tp_proc_piece pc[REAP_MAX + 1];
	uint8_t seen[REAP_MAX];

	for (;;) {
		unsigned n = 0, nrec, j = 0, beyond = 0;
		int r;

		if (word_at)
			pc[n++] = (struct tp_proc_piece){word_at, word, 8};
		/* The frames below the stack pointer, and a few above it: calls returned
		 * without a stop may sit anywhere. */
		for (unsigned i = s->n; i-- > 0 && n - (word_at ? 1 : 0) < REAP_MAX;) {
			struct frame *f = &s->f[i];

			if ((f->sp > limit || !strict) && ++beyond > 8)
				break;
			if (f->slot >= 0 && !f->unhooked && !f->borrowed) {
				pc[n] = (struct tp_proc_piece){rec_at(b, (uint32_t)f->slot),
							       b->rbuf[n - (word_at ? 1 : 0)],
							       TP_RSTUB_REC_SIZE};
				n++;
			}
		}
		nrec = n - (word_at ? 1 : 0);
		r = nrec ? tp_proc_read_pieces(b->pid, pc, n) : -ENODATA;
		if (r) {
			if (word_at && tp_proc_read(b->pid, word_at, word, 8) != 8)
				return -EFAULT;
			return 0; /* the records are looked at again later */
		}
		if (running) {
			/* Only a record whose "done" the first read saw is complete in the
			 * second: the stub wrote everything else before it. */
			for (unsigned i = 0; i < nrec; i++)
				seen[i] = b->rbuf[i][TP_RSTUB_DONE];
			if (tp_proc_read_pieces(b->pid, pc + (word_at ? 1 : 0), nrec))
				return 0;
			for (unsigned i = 0; i < nrec; i++)
				b->rbuf[i][TP_RSTUB_DONE] &= seen[i];
		}
		word_at = 0;
		while (s->n) {
			struct frame *f = &s->f[s->n - 1];
			const uint8_t *rec = NULL;
			uint32_t done = 0;

			if (f->slot >= 0 && !f->unhooked && !f->borrowed) {
				if (j == nrec)
					break;
				rec = b->rbuf[j++];
				memcpy(&done, rec + TP_RSTUB_DONE, 4);
			}
			if (!done) {
				if (!strict || f->sp >= limit)
					return 0;
				drop_top(b, s); /* below the stack pointer and never returned */
				continue;
			}
			struct tp_bp_stop st = {.kind = TP_BP_STOP_RETURN,
						.func = f->func,
						.sp = f->sp,
						.ret_addr = f->ret,
						.async = true,
						.err_valid = b->errno_known};

			memcpy(&st.rax, rec + TP_RSTUB_RAX, 8);
			memcpy(&st.rdx, rec + TP_RSTUB_RDX, 8);
			memcpy(&st.xmm0, rec + TP_RSTUB_XMM0, 8);
			memcpy(&st.tsc, rec + TP_RSTUB_TSC, 8);
			memcpy(&st.err, rec + TP_RSTUB_ERRNO, 4);
			slot_put(b, (uint32_t)f->slot);
			st.depth = --s->n;
			b->ret_fn(b->ret_arg, tid, &st);
		}
		if (!s->n)
			return 0;
		/* Every record read was of a call that returned: look further down. */
	}
}

void tp_bps_set_async(struct tp_bps *bps, tp_bp_return_fn fn, void *arg)
{
	bps->ret_fn = fn;
	bps->ret_arg = arg;
}

void tp_bps_set_errno(struct tp_bps *bps, int64_t tpoff)
{
	bps->errno_tpoff = tpoff;
	bps->errno_known = true;
}

int tp_bp_stub_fault(struct tp_bps *bps, pid_t tid)
{
	struct user_regs_struct r;
	uint8_t op[2];
	uint64_t tsc;

	if (tp_proc_get_regs(tid, &r) || !in_stubs(bps, r.rip) ||
	    tp_proc_read(bps->pid, r.rip, op, 2) != 2 || op[0] != 0x0f || op[1] != 0x31)
		return 0;
	/* The program forbade rdtsc (prctl PR_SET_TSC): tracepad reads the counter for it. */
	tsc = __rdtsc();
	r.rax = (uint32_t)tsc;
	r.rdx = tsc >> 32;
	r.rip += 2;
	return tp_proc_set_regs(tid, &r) ? -EIO : 1;
}

int tp_bp_reap(struct tp_bps *bps, pid_t tid, bool running, uint64_t sp)
{
	struct shadow *s = shadow_of(bps, tid, false);

	if (!s || !bps->amap)
		return 0;
	return reap(bps, tid, s, sp ? sp : UINT64_MAX, sp != 0, running && !sp, 0, NULL);
}

/* ---- hooked returns ---- */

/* Entry of a TP_BP_RETURN function: the return address at [sp] goes to the shadow stack,
 * a stub's address (@async and one is free) or the trampoline's takes its place.
 * @regs: the entry's registers. */
static int hook_return(struct tp_bps *b, pid_t tid, const struct user_regs_struct *regs,
		       uint64_t func, bool async)
{
	struct shadow *s = shadow_of(b, tid, true);
	uint64_t sp = regs->rsp, ret = 0;
	int32_t slot = -1;
	int r;

	if (!s)
		return -ENOMEM;
	r = b->amap ? reap(b, tid, s, sp, true, false, sp, &ret)
		    : (tp_proc_read(b->pid, sp, &ret, sizeof(ret)) == sizeof(ret) ? 0 : -EFAULT);
	if (r)
		return r;
	/* Frames below this call's are gone (longjmp, exceptions, exit of a thread's
	 * function without returning): a new call never sits above a live one.  At an equal
	 * sp, a tail call from a hooked function finds its hook as its return address;
	 * anything else there means the frame's call is gone too. */
	while (s->n && (s->f[s->n - 1].sp < sp ||
			(s->f[s->n - 1].sp == sp && ret != hook_of(b, &s->f[s->n - 1]))))
		drop_top(b, s);
	r = shadow_reserve(s, s->n + 1);
	if (r)
		return r;
	if (async && b->ret_fn)
		slot = slot_get(b, tid);
	if (slot >= 0) {
		uint64_t stub = stub_at(b, (uint32_t)slot), rec = rec_at(b, (uint32_t)slot);
		uint64_t head[3] = {0, ret, rec + TP_RSTUB_ERRNO};
		struct tp_proc_piece pc[2] = {{sp, &stub, 8}, {rec, head, sizeof(head)}};

		if (b->errno_known && regs->fs_base && regs->fs_base != s->errno_fs) {
			/* Threads not set up by libc may have another TLS layout: the stub
			 * reads errno only where tracepad could. */
			uint32_t v;

			s->errno_fs = regs->fs_base;
			s->errno_ok = tp_proc_read(b->pid, regs->fs_base + (uint64_t)b->errno_tpoff,
						   &v, 4) == 4;
		}
		if (b->errno_known && regs->fs_base && s->errno_ok)
			head[2] = regs->fs_base + (uint64_t)b->errno_tpoff;
		r = tp_proc_write_pieces(b->pid, pc, 2);
		if (r) {
			slot_put(b, (uint32_t)slot);
			slot = -1;
		}
	}
	if (slot < 0) {
		r = tp_proc_write(b->pid, sp, &b->tramp, sizeof(b->tramp));
		if (r)
			return r;
	}
	s->f[s->n++] = (struct frame){.sp = sp, .ret = ret, .func = func, .slot = slot};
	return 0;
}

/* The trampoline's int3: the return went through it with sp = frame sp + 8. */
static int unhook_return(struct tp_bps *b, pid_t tid, uint64_t sp, struct tp_bp_stop *out)
{
	struct shadow *s = shadow_of(b, tid, false);
	struct frame f;

	if (!s)
		return -ENOENT;
	if (b->amap)
		reap(b, tid, s, sp - 9, true, false, 0, NULL);
	while (s->n && s->f[s->n - 1].sp < sp - 8)
		drop_top(b, s);
	if (s->n && s->f[s->n - 1].sp == sp - 8) {
		f = s->f[--s->n];
	} else {
		/* Not on the stack: a frame dropped too early, if it is still known. */
		unsigned k, last = s->ngrave < GRAVE ? s->ngrave : GRAVE;

		for (k = 0; k < last; k++)
			if (s->grave[(s->ngrave - 1 - k) % GRAVE].sp == sp - 8 &&
			    s->grave[(s->ngrave - 1 - k) % GRAVE].slot < 0)
				break;
		if (k == last)
			return -ENOENT;
		f = s->grave[(s->ngrave - 1 - k) % GRAVE];
		s->grave[(s->ngrave - 1 - k) % GRAVE].sp = 0;
	}
	if (out) {
		out->func = f.func;
		out->ret_addr = f.ret;
		out->sp = f.sp;
		out->depth = s->n;
	}
	return tp_proc_set_pc(tid, f.ret);
}

int tp_bp_hit(struct tp_bps *bps, pid_t tid, const struct user_regs_struct *regs, unsigned flags,
	      struct tp_bp_stop *out)
{
	struct user_regs_struct own;
	struct tp_bp_stop st = {0};
	struct shadow *s;
	struct bp *bp;
	uint64_t pc;
	int r;

	if (!regs) {
		r = tp_proc_get_regs(tid, &own);
		if (r)
			return r;
	} else {
		own = *regs;
	}
	pc = own.rip;
	if (bps->tramp && pc - 1 == bps->tramp) {
		st.kind = TP_BP_STOP_RETURN;
		st.rax = own.rax;
		st.rdx = own.rdx;
		r = unhook_return(bps, tid, own.rsp, &st);
		goto resume;
	}
	bp = find(bps, pc - 1);
	if (!bp)
		return 0;
	bp->hits++;
	st.kind = TP_BP_STOP_ENTRY;
	st.func = bp->addr;
	st.sp = own.rsp;
	r = 0;
	if (bp->ret)
		r = hook_return(bps, tid, &own, bp->addr, flags & TP_BP_HIT_ASYNC);
	else if (bps->amap)
		r = tp_bp_reap(bps, tid, false, own.rsp); /* what returned comes first */
	s = shadow_of(bps, tid, false);
	st.depth = s ? s->n : 0;
	if (!r)
		r = tp_proc_set_pc(tid, bp->slot);
resume:
	if (out)
		*out = st;
	if (!r && !(flags & TP_BP_HIT_STAY))
		r = tp_proc_resume(bps->p, tid, TP_RESUME_CONT, 0);
	return r ? r : 1;
}

int tp_bp_call(struct tp_bps *bps, pid_t tid, uint64_t fn, const uint64_t args[6], uint64_t *ret)
{
	struct user_regs_struct saved, regs;
	struct tp_event ev;
	uint64_t sp;
	int r, held = 0;

	if (!bps->tramp)
		return -ENOENT;
	r = tp_proc_get_regs(tid, &saved);
	if (r)
		return r;
	/* Below the red zone, aligned as at a call: [rsp] = return address, rsp + 8 % 16 = 0. */
	sp = ((saved.rsp - 1024) & ~15ULL) - 8;
	r = tp_proc_write(bps->pid, sp, &bps->tramp, sizeof(sp));
	if (r)
		return r;
	regs = saved;
	regs.rsp = sp;
	regs.rip = fn;
	regs.rdi = args[0];
	regs.rsi = args[1];
	regs.rdx = args[2];
	regs.rcx = args[3];
	regs.r8 = args[4];
	regs.r9 = args[5];
	regs.rax = 0;
	regs.orig_rax = -1; /* no syscall restart on the way out of this stop */
	r = tp_proc_set_regs(tid, &regs);
	if (!r)
		r = tp_proc_resume(bps->p, tid, TP_RESUME_CONT, 0);
	while (!r) {
		r = wait_one(bps->p, &ev);
		if (r)
			break;
		if (ev.tid != tid) {
			r = defer(bps, &ev);
			continue;
		}
		if (ev.kind == TP_EV_SIGNAL && ev.si.si_code > 0 && ev.sig != SIGCHLD) {
			/* A fault of the function itself (it needed something not set up
			 * yet): give up, nothing of it reaches the program. */
			r = -EFAULT;
			break;
		}
		if (ev.kind == TP_EV_SIGNAL) {
			held = ev.sig;
			r = resume_unless_running(bps, tid, TP_RESUME_CONT);
			continue;
		}
		if (ev.kind == TP_EV_EXIT || ev.kind == TP_EV_EXITED) {
			defer(bps, &ev);
			r = -ESRCH;
			break;
		}
		if (ev.kind != TP_EV_BREAKPOINT || tp_proc_get_regs(tid, &regs)) {
			r = -EIO;
			break;
		}
		if (regs.rip - 1 == bps->tramp && regs.rsp == sp + 8) {
			*ret = regs.rax;
			break;
		}
		/* One of our breakpoints inside the function: run its slot, no hooks. */
		struct bp *bp = find(bps, regs.rip - 1);

		r = bp ? tp_proc_set_pc(tid, bp->slot) : -EIO;
		if (!r)
			r = tp_proc_resume(bps->p, tid, TP_RESUME_CONT, 0);
	}
	if (r != -ESRCH) {
		int r2 = tp_proc_set_regs(tid, &saved);

		if (!r)
			r = r2;
	}
	if (held)
		syscall(SYS_tgkill, bps->pid, tid, held);
	flush_deferred(bps);
	return r;
}

bool tp_bp_owns_trap(struct tp_bps *bps, uint64_t pc)
{
	struct bp *bp;

	if (bps->tramp && pc - 1 == bps->tramp)
		return true;
	/* Past a 1-byte instruction, addr + 1 is also where its slot jumps back to. */
	bp = find(bps, pc - 1);
	return bp && bp->len > 1;
}

uint64_t tp_bp_trampoline(const struct tp_bps *bps)
{
	return bps->tramp;
}

bool tp_bp_real_return(struct tp_bps *bps, pid_t tid, uint64_t slot, uint64_t *ret)
{
	struct shadow *s = shadow_of(bps, tid, false);

	for (unsigned i = s ? s->n : 0; i-- > 0;) {
		if (s->f[i].sp == slot) {
			*ret = s->f[i].ret;
			return true;
		}
	}
	return false;
}

void tp_bp_drop_thread(struct tp_bps *bps, pid_t tid)
{
	struct shadow *s = shadow_of(bps, tid, false);

	if (!s)
		return;
	/* The thread is gone, and with it every way back to its stubs. */
	for (unsigned i = 0; i < s->n; i++)
		if (s->f[i].slot >= 0 && !s->f[i].borrowed)
			slot_put(bps, (uint32_t)s->f[i].slot);
	free(s->f);
	*s = bps->sh[--bps->nsh];
}

int tp_bp_copy_shadow(struct tp_bps *bps, pid_t from, struct tp_bps *to, pid_t tid)
{
	struct shadow *src = shadow_of(bps, from, false), *dst;
	int r;

	if (!src || !src->n)
		return 0;
	dst = shadow_of(to, tid, true);
	if (!dst)
		return -ENOMEM;
	src = shadow_of(bps, from, false); /* @to may be @bps: its array moved */
	r = shadow_reserve(dst, src->n);
	if (r)
		return r;
	memcpy(dst->f, src->f, src->n * sizeof(*src->f));
	dst->n = src->n;
	for (unsigned i = 0; to == bps && i < dst->n; i++)
		dst->f[i].borrowed = true;
	return 0;
}

int tp_bp_unhook_thread(struct tp_bps *bps, pid_t tid)
{
	struct shadow *s = shadow_of(bps, tid, false);
	int err = 0;

	for (unsigned i = s ? s->n : 0; i-- > 0;) {
		struct frame *f = &s->f[i];
		uint64_t v;
		int r;

		if (f->unhooked || tp_proc_read(bps->pid, f->sp, &v, sizeof(v)) != sizeof(v) ||
		    v != hook_of(bps, f))
			continue;
		r = tp_proc_write(bps->pid, f->sp, &f->ret, sizeof(f->ret));
		if (r && !err)
			err = r;
		f->unhooked = !r;
	}
	return err;
}

int tp_bp_rehook_thread(struct tp_bps *bps, pid_t tid, uint64_t sp)
{
	struct shadow *s = shadow_of(bps, tid, false);
	int err = 0;

	while (s && s->n && s->f[s->n - 1].sp <= sp)
		drop_top(bps, s);
	for (unsigned i = s ? s->n : 0; i-- > 0;) {
		struct frame *f = &s->f[i];
		uint64_t v;
		int r;

		if (!f->unhooked)
			continue;
		f->unhooked = false;
		if (tp_proc_read(bps->pid, f->sp, &v, sizeof(v)) != sizeof(v) || v != f->ret)
			continue;
		v = hook_of(bps, f);
		r = tp_proc_write(bps->pid, f->sp, &v, sizeof(v));
		if (r && !err)
			err = r;
	}
	return err;
}

unsigned tp_bp_depth(struct tp_bps *bps, pid_t tid)
{
	struct shadow *s = shadow_of(bps, tid, false);

	return s ? s->n : 0;
}

int tp_bp_forget(struct tp_bps *bps, uint64_t lo, uint64_t hi)
{
	unsigned n = 0;

	for (unsigned i = 0; i < bps->cap; i++)
		if (bps->tab[i].addr >= lo && bps->tab[i].addr < hi)
			n++;
	if (!n)
		return 0;
	/* Rebuild the table without them (open addressing: no holes left behind). */
	struct bp *old = bps->tab;
	unsigned cap = bps->cap;

	bps->tab = calloc(cap, sizeof(*bps->tab));
	if (!bps->tab) {
		bps->tab = old;
		return -ENOMEM;
	}
	bps->n = 0;
	for (unsigned i = 0; i < cap; i++) {
		struct bp *bp;

		if (!old[i].addr || (old[i].addr >= lo && old[i].addr < hi))
			continue;
		bp = add(bps, old[i].addr);
		*bp = old[i];
	}
	free(old);
	return (int)n;
}

struct tp_bps *tp_bps_clone(const struct tp_bps *parent, pid_t pid)
{
	struct tp_bps *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->p = parent->p;
	b->pid = pid;
	b->cap = parent->cap;
	b->n = parent->n;
	b->tramp = parent->tramp;
	b->nareas = parent->nareas;
	b->tab = malloc(b->cap * sizeof(*b->tab));
	b->areas = malloc((b->nareas ? b->nareas : 1) * sizeof(*b->areas));
	if (!b->tab || !b->areas) {
		tp_bps_free(b);
		return NULL;
	}
	memcpy(b->tab, parent->tab, b->cap * sizeof(*b->tab));
	memcpy(b->areas, parent->areas, b->nareas * sizeof(*b->areas));
	/* The child has a copy of the stubs and records, and of the frames using them. */
	b->ret_fn = parent->ret_fn;
	b->ret_arg = parent->ret_arg;
	b->errno_tpoff = parent->errno_tpoff;
	b->errno_known = parent->errno_known;
	b->async_failed = parent->async_failed;
	if (parent->amap) {
		if (async_alloc(b)) {
			tp_bps_free(b);
			return NULL;
		}
		b->amap = parent->amap;
		b->anext = parent->anext;
		b->nafree = parent->nafree;
		b->naquar = parent->naquar;
		memcpy(b->afree, parent->afree, b->nafree * sizeof(*b->afree));
		memcpy(b->aquar, parent->aquar, b->naquar * sizeof(*b->aquar));
	}
	return b;
}

int tp_bp_lookup(struct tp_bps *bps, uint64_t addr, uint64_t *hits, uint64_t *slot)
{
	struct bp *bp = find(bps, addr);

	if (!bp)
		return 0;
	if (hits)
		*hits = bp->hits;
	if (slot)
		*slot = bp->slot;
	return 1;
}

/* The breakpoint whose slot holds @pc, or NULL. */
static struct bp *in_slot(struct tp_bps *b, uint64_t pc)
{
	for (unsigned i = 0; i < b->cap; i++) {
		struct bp *bp = &b->tab[i];

		if (bp->addr && pc >= bp->slot && pc < bp->slot + SLOT_SIZE)
			return bp;
	}
	return NULL;
}

static bool in_areas(struct tp_bps *b, uint64_t pc)
{
	if (in_stubs(b, pc))
		return true;
	for (unsigned i = 0; i < b->nareas; i++)
		if (pc >= b->areas[i].base && pc < b->areas[i].base + AREA_SIZE)
			return true;
	return false;
}

/* An int3 stop of ours that was reported but not handled: rewind it so the instruction runs
 * normally once the byte is restored, or complete a return.  1 when handled, 0 when not
 * ours, -errno. */
static int settle(struct tp_bps *b, const struct tp_event *ev)
{
	struct user_regs_struct regs;
	uint64_t pc;
	int r;

	if (ev->kind != TP_EV_BREAKPOINT || ev->pid != b->pid || tp_proc_get_pc(ev->tid, &pc))
		return 0;
	if (b->tramp && pc - 1 == b->tramp) {
		r = tp_proc_get_regs(ev->tid, &regs);
		if (!r)
			r = unhook_return(b, ev->tid, regs.rsp, NULL);
		return r ? r : 1;
	}
	if (find(b, pc - 1)) {
		r = tp_proc_set_pc(ev->tid, pc - 1);
		return r ? r : 1;
	}
	return 0;
}

/* Consume what the stopped tasks still have to report (see settle()); other events are kept
 * for the caller.  Then a task stopped by the interrupt may still have the SIGTRAP of one of
 * our int3s pending (it trapped as the interrupt came): once detached, that signal would
 * kill it.  Let it take the signal while still traced. */
static int drain(struct tp_bps *b)
{
	struct tp_event ev;
	pid_t tids[1024];
	int r, n, err = 0;

	for (;;) {
		r = wait_one(b->p, &ev);
		if (r == -EDEADLK || r == -ECHILD)
			break;
		if (r)
			return r;
		r = settle(b, &ev);
		if (r < 0 && !err)
			err = r;
		if (r == 0 && (r = defer(b, &ev)))
			return r;
	}
	n = tp_proc_tasks_of(b->p, b->pid, tids, 1024);
	for (int i = 0; i < n && i < 1024; i++) {
		if (!tp_proc_sig_pending(tids[i], SIGTRAP))
			continue;
		r = tp_proc_resume(b->p, tids[i], TP_RESUME_CONT, 0);
		while (!r) {
			r = wait_one(b->p, &ev);
			if (r)
				break;
			if (ev.tid == tids[i] && settle(b, &ev) != 0)
				break;
			r = defer(b, &ev);
			if (ev.tid == tids[i])
				break;
		}
		if (r && r != -ESRCH && !err)
			err = r;
	}
	return err;
}

int tp_bp_signal_stop(struct tp_bps *bps, pid_t tid, const siginfo_t *si)
{
	uint64_t pc;
	int r, steps = 0, held = 0;

	for (;;) {
		r = tp_proc_get_pc(tid, &pc);
		if (r || !in_areas(bps, pc) || in_stubs(bps, pc))
			break;
		if (!steps && bps->tramp && pc == bps->tramp)
			return 2;
		if (steps == 8) {
			r = -EIO;
			break;
		}
		/* The slot's instruction and its jmp back: the task then is where it would
		 * have been without the slot, and its handler's frame says so. */
		r = step_one(bps, tid, &held);
		if (r)
			break;
		steps++;
	}
	if (held)
		syscall(SYS_tgkill, bps->pid, tid, held);
	flush_deferred(bps);
	if (r && r != -ESRCH) {
		/* Its handler's frame may hold a slot's address: the slots stay. */
		bps->keep_areas = true;
		return r;
	}
	if (r || !steps)
		return r;
	return tp_proc_set_siginfo(tid, si) ? -EIO : 1;
}

/* Move task @tid out of the slots: back to the breakpoint when the displaced instruction
 * has not started, else step until it has left (a relocated call is push + jmp). */
static int leave_slot(struct tp_bps *b, pid_t tid)
{
	uint64_t pc;
	int r, held = 0;

	/* A slot's copy is one or two instructions, a return stub fourteen (and a tail call
	 * chains stubs). */
	for (int i = 0; i < 128; i++) {
		struct bp *bp;

		r = tp_proc_get_pc(tid, &pc);
		if (r)
			return r;
		if (!in_areas(b, pc)) {
			/* A reported int3 stop never passed to tp_bp_hit().  Only certain when
			 * addr + 1 is inside the instruction; a 1-byte one (push %rbp) is left
			 * alone, since pc = addr + 1 is then also where its slot returns. */
			bp = find(b, pc - 1);
			if (bp && bp->len > 1)
				return tp_proc_set_pc(tid, bp->addr);
			break;
		}
		bp = in_slot(b, pc);
		if (bp && pc == bp->slot)
			return tp_proc_set_pc(tid, bp->addr);
		tp_dbg("bp: %d at 0x%llx in an SSOL area (slot of 0x%llx at 0x%llx), stepping out",
		       tid, (unsigned long long)pc, bp ? (unsigned long long)bp->addr : 0ull,
		       bp ? (unsigned long long)bp->slot : 0ull);
		r = step_one(b, tid, &held);
		if (r)
			return r;
	}
	if (held)
		syscall(SYS_tgkill, b->pid, tid, held);
	/* The stubs stay mapped: one still running finishes without tracepad. */
	return in_areas(b, pc) && !in_stubs(b, pc) ? -EIO : 0;
}

/* Put return address @ret back at @sp if @hook is still there (else the frame is gone). */
static int give_back(struct tp_bps *b, uint64_t sp, uint64_t hook, uint64_t ret)
{
	uint64_t v;

	if (tp_proc_read(b->pid, sp, &v, sizeof(v)) != sizeof(v) || v != hook)
		return 0;
	return tp_proc_write(b->pid, sp, &ret, sizeof(ret));
}

int tp_bp_remove_all(struct tp_bps *bps)
{
	pid_t tids[1024];
	uint8_t back[TP_ARCH_MAX_INSN_LEN];
	int r, n, err = 0;

	/* Best effort from here on: every byte that can be restored is, whatever failed. */
	err = tp_proc_stop_all(bps->p, 0);
	r = drain(bps);
	if (r && !err)
		err = r;
	n = tp_proc_tasks_of(bps->p, bps->pid, tids, 1024);
	for (int i = 0; i < n && i < 1024; i++) {
		r = leave_slot(bps, tids[i]);
		if (r && r != -ESRCH)
			bps->keep_areas = true;
		if (r && r != -ESRCH && !err)
			err = r;
	}
	/* Every thread is out of the stubs: the returns they recorded are reported. */
	for (unsigned i = 0; bps->ret_fn && bps->amap && i < bps->nsh; i++)
		reap(bps, bps->sh[i].tid, &bps->sh[i], UINT64_MAX, false, false, 0, NULL);
	for (unsigned i = 0; i < bps->cap; i++) {
		struct bp *bp = &bps->tab[i];

		if (!bp->addr)
			continue;
		r = tp_proc_write(bps->pid, bp->addr, bp->orig, 1);
		if (!r && (tp_proc_read(bps->pid, bp->addr, back, bp->len) != bp->len ||
			   memcmp(back, bp->orig, bp->len)))
			r = -EIO;
		if (r && !err)
			err = r;
		bp->addr = 0;
	}
	bps->n = 0;
	/* Return addresses the trampoline and the stubs took are given back on the stacks,
	 * also those of frames dropped as unwound that could still return (a stack switch). */
	for (unsigned i = 0; i < bps->nsh; i++) {
		struct shadow *s = &bps->sh[i];

		for (unsigned k = 0; k < s->n; k++) {
			r = give_back(bps, s->f[k].sp, hook_of(bps, &s->f[k]), s->f[k].ret);
			if (r && !err)
				err = r;
		}
		s->n = 0;
	}
	for (unsigned i = 0; i < bps->naquar; i++)
		give_back(bps, bps->aquar[i].sp, stub_at(bps, bps->aquar[i].slot),
			  bps->aquar[i].ret);
	bps->naquar = 0;
	bps->tramp = 0;
	/* Nothing runs in the areas any more: give the address space back (unless a thread
	 * could not be moved out of a slot, when it stays, as the stubs' area does). */
	for (unsigned i = 0; i < bps->nareas && n > 0 && !bps->keep_areas; i++) {
		r = unmap(bps, tids[0], bps->areas[i].base, AREA_SIZE);
		if (r && !err)
			err = r;
	}
	bps->nareas = 0;
	/* The stubs' area is left mapped: a return address that still points at a stub (in a
	 * signal frame, on a stack switched away, in a copied stack) returns through it to
	 * the right place, since each record keeps its real return address. */
	bps->amap = 0;
	flush_deferred(bps);
	return err;
}
