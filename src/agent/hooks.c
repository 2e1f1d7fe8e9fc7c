/* Call hooks in the agent (`tracepad calls --engine agent`): a jump pad on each selected
 * function's entry records the call into the thread's ring and swaps the return address for
 * the return trampoline (hooks-entry.S), which records the return and goes back to the real
 * caller through the thread's shadow stack.  The shadow stacks live in the agent's own
 * mappings, not in tracepad's block: a frame hooked before a detach still returns through
 * them.  Built -mgeneral-regs-only: the pads and the trampoline keep no vector state.
 * Design (longjmp, exceptions, unwinders, threads): docs/INTERNALS.md, "Call hooks". */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <stddef.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agent/agent-priv.h"
#include "agent/hooks-abi.h"
#include "agent/hooks-args.h"
#include "agent/hooks-fast.h"
#include "agent/ring.h"
#include "rt/pad.h"

/* Frames a thread's shadow stack follows at most: deeper calls are recorded, their returns
 * not (ctl->deep).  A recursion of 32-byte frames fills an 8 MiB stack at that depth; 10
 * MiB of address space a thread, reserved without swap, its pages touched only as deep as
 * the thread calls. */
#define SHADOW_MAX (1u << 18)
#define SHADOWS_MAX 4096 /* threads of a process with a shadow stack at once */
#define HIT_POLL 0xffff	 /* hooked calls of a thread between two looks for tracepad */

int tracepad_hooks_attach(int tracer, int fd);
int tracepad_hooks_install(void);
long tracepad_hooks_detach(void);
void tp_hk_tramp(void) TP_HIDDEN;
void tp_hk_pad_entry(void) TP_HIDDEN;
uint64_t tp_hk_ret(uint64_t sp, uint64_t rax, uint64_t rdx) TP_HIDDEN;
extern int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
			     void *dso);

/* A frame whose return goes through the trampoline. */
struct sframe {
	uint64_t slot; /* where its return address is (the caller's rsp - 8) */
	uint64_t ret;  /* the real return address */
	uint32_t func;
	uint16_t flags; /* SF_* */
	uint16_t gen;	/* the session that hooked it: its events go to that session only */
	uint64_t out;	/* the out-parameter copied at the return (tp_hk_plan.out) */
};
#define SF_EVENTS 0x1	/* its return (or unwinding) is an event */
#define SF_RESTORED 0x2 /* the real address is back in the slot, for an unwinder */
#define SF_LOSSY 0x4	/* by an unwinder that returns: the frame may return unseen */

struct shadow {
	int32_t tid; /* its thread; 0: free */
	uint32_t n;
	/* its thread is inside a hook (the entry's callback or the trampoline's) and may use
	 * the block: plain increments (a signal handler's hook gives back what it took), read
	 * by the detach with every other thread stopped (a stop orders its stores), so no
	 * locked add, here or in the pads (TP_RT_PAD_UNCOUNTED) */
	volatile uint32_t busy;
	uint32_t pad;
	uint64_t walk_sp; /* an unwinder started below this: frames put back until it is over */
	struct sframe f[SHADOW_MAX];
};

/* Named for the return trampoline's common case (hooks-entry.S, hooks-fast.h). */
struct hk_state {
	struct tp_hk_ctl *ctl;
	uint64_t size;
	struct tp_hk_func *funcs;
	const struct tp_hk_cfa *cfa; /* the CFA table (plan.walk) */
	struct tp_ag_rings rs;
	int64_t errno_tpoff; /* the block's, read once */
	uint32_t errno_ok;
	int prefetchw; /* the CPU has PREFETCHW */
	uint32_t gen;
	int on, forked, atfork;
	int dl_busy; /* a thread hooks a dlopen'ed object's functions: no detach meanwhile */
	struct tp_rt_pad *pads[TP_HK_MAX_FUNCS];
	uint64_t addrs[TP_HK_MAX_FUNCS];
	uint32_t npads;
	struct shadow *shadows[SHADOWS_MAX];
	uint32_t nshadows;
} hk __asm__("tp_hk_state") TP_HIDDEN;

struct hstate {
	uint32_t gen;
	uint32_t polls;
	struct tp_ag_writer w;
	/* kept across sessions: a frame hooked in an earlier one still returns through it */
	struct shadow *sh;
	uint32_t in; /* inside a hook: a signal handler's hooked calls are not followed */
};
__thread struct hstate hts __asm__("tp_hk_ts") TP_HIDDEN __attribute__((tls_model("initial-exec")));

#define OFF(t, f, v) _Static_assert(offsetof(t, f) == (v), #t "." #f " of hooks-fast.h")
OFF(struct hstate, gen, HS_GEN);
OFF(struct hstate, w.ring, HS_RING);
OFF(struct hstate, w.tail, HS_TAIL);
OFF(struct hstate, sh, HS_SH);
OFF(struct hstate, in, HS_IN);
OFF(struct shadow, n, SH_N);
OFF(struct shadow, busy, SH_BUSY);
OFF(struct shadow, walk_sp, SH_WALK);
OFF(struct shadow, f, SH_F);
OFF(struct sframe, slot, SF_SLOT);
OFF(struct sframe, ret, SF_RET);
OFF(struct sframe, func, SF_FUNC);
OFF(struct sframe, flags, SF_FLAGS);
OFF(struct sframe, gen, SF_GEN);
OFF(struct hk_state, ctl, HK_CTL);
OFF(struct hk_state, funcs, HK_FUNCS);
OFF(struct hk_state, rs.rings, HK_RINGS);
OFF(struct hk_state, rs.data, HK_DATA);
OFF(struct hk_state, rs.size, HK_RSIZE);
OFF(struct hk_state, errno_tpoff, HK_ERRNO_TPOFF);
OFF(struct hk_state, errno_ok, HK_ERRNO_OK);
OFF(struct hk_state, prefetchw, HK_PREFETCHW);
OFF(struct hk_state, gen, HK_GEN);
OFF(struct hk_state, on, HK_ON);
OFF(struct hk_state, forked, HK_FORKED);
OFF(struct tp_hk_func, plan.ret, FN_PLAN_RET);
OFF(struct tp_hk_func, plan.out, FN_PLAN_RET + 1);
OFF(struct tp_ftp_ring, head, RING_HEAD);
#undef OFF
_Static_assert(sizeof(struct sframe) == SF_SIZE && sizeof(struct tp_hk_func) == FN_SIZE &&
		   sizeof(struct tp_ftp_ring) == RING_SIZE && SF_EVENTS == SF_EVENTS_BIT &&
		   SF_RESTORED == SF_RESTORED_BIT &&
		   TP_HK_REC_SIZE(TP_HK_RETURN_REGS) == REC_RETURN_SIZE &&
		   TP_HK_RETURN == REC_RETURN && TP_HK_R_ERRNO == REC_R_ERRNO,
	       "hooks-fast.h");

/* ---- rings ---- */

static int tracer_gone(void)
{
	int t = hk.ctl->tracer_pid;

	if (t <= 0 || tp_raw2(SYS_kill, t, 0) != -ESRCH)
		return 0;
	__atomic_store_n(&hk.on, 0, __ATOMIC_RELEASE);
	return 1;
}

/* The thread's first record in a ring says whose the ring's records are from then on. */
static int claim(struct hstate *t)
{
	struct tp_ftp_ring *ring = NULL;
	struct tp_hk_rec *h;

	if (!tp_ag_ring_own(&hk.rs, &t->w)) {
		__atomic_fetch_add(&hk.ctl->no_ring, 1, __ATOMIC_RELAXED);
		return -1;
	}
	h = (struct tp_hk_rec *)tp_ag_ring_reserve(&hk.rs, &t->w, TP_HK_REC_SIZE(0), &ring);
	if (!h) {
		/* no record may go without its thread's: the ring is given up */
		t->w.ring = -2;
		__atomic_fetch_add(&hk.ctl->lost, 1, __ATOMIC_RELAXED);
		return -1;
	}
	*h = (struct tp_hk_rec){TP_HK_REC_SIZE(0),  TP_HK_THREAD,	    0, 0,
				(uint32_t)t->w.tid, __builtin_ia32_rdtsc(), 0};
	__atomic_store_n(&ring->head, ring->head + TP_HK_REC_SIZE(0), __ATOMIC_RELEASE);
	return 0;
}

/* The callers' real return addresses in a stack copy from @rsp (@len bytes), for an unwinder. */
static void unswap(const struct shadow *s, uint64_t rsp, uint64_t *snap, uint32_t len)
{
	uint64_t tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;

	for (uint32_t k = s->n; k-- > 0;) {
		uint64_t slot = s->f[k].slot;

		if (slot < rsp)
			continue;
		if (slot + 8 > rsp + len)
			break;
		if (snap[(slot - rsp) / 8] == tramp)
			snap[(slot - rsp) / 8] = s->f[k].ret;
	}
}

/* What a record carries after its registers (hooks-args.c): the entry's memory, vector
 * registers and stack, or the return's. */
struct payload {
	const struct tp_hk_plan *plan;
	const struct tp_rt_regs *r; /* NULL: a return */
	uint64_t rax, out;
	int vregs;
};

/* ---- backtraces walked in the program (plan.walk) ---- */

/* Return address @ra's rule in the CFA table (hooks-abi.h): 0 when it is not there. */
static inline int cfa_rule(uint64_t ra, uint64_t *rule)
{
	const struct tp_hk_cfa *tab = hk.cfa;
	uint32_t i = tp_hk_cfa_hash(ra);

	for (uint32_t k = 0; k < TP_HK_CFA_PROBES; k++, i = (i + 1) & (TP_HK_CFA_SLOTS - 1)) {
		uint64_t at = __atomic_load_n(&tab[i].ra, __ATOMIC_ACQUIRE);

		if (!at)
			return 0;
		if (at != ra)
			continue;
		*rule = __atomic_load_n(&tab[i].rule, __ATOMIC_ACQUIRE);
		/* tracepad may have cleared the slot and filled it again meanwhile */
		return __atomic_load_n(&tab[i].ra, __ATOMIC_ACQUIRE) == ra &&
		       (*rule & TP_HK_CFA_VALID);
	}
	return 0;
}

/* A stack word for the walk: 0 outside [@lo, *@hi) or where it cannot be read, as tracepad's
 * unwinder sees it in the stack copy the entry would carry instead (a zero return address
 * ends the stack there), so that both give the same frames.  The copy stops at the first
 * page it cannot read: so does *@hi. */
static inline uint64_t word(uint64_t at, uint64_t lo, uint64_t *hi)
{
	uint64_t v;

	if (at < lo || at + 8 > *hi)
		return 0;
	if (tp_rt_mem_read_fast(at, &v, 8)) {
		*hi = at & ~4095ull;
		return 0;
	}
	return v;
}

/* The backtrace of an entry with registers @r, walked by the CFA table up to @max frames over
 * the @span bytes of stack a copy would hold, as a TP_HK_P_PCS piece at @at: its length, 0
 * when a caller is not in the table (or the stack is not as the table says), and the stack
 * is copied for tracepad's unwinder instead. */
static uint32_t walk(const struct hstate *t, const struct tp_rt_regs *r, uint8_t *at, uint32_t max,
		     uint32_t span)
{
	struct tp_hk_piece *h = (struct tp_hk_piece *)at;
	uint64_t *pcs = (uint64_t *)(h + 1);
	uint64_t tramp = (uint64_t)(uintptr_t)&tp_hk_tramp, cfa = r->rsp + 8, rbp = r->rbp;
	uint64_t lo = r->rsp, hi = r->rsp + span;
	const struct shadow *s = t->sh;
	uint32_t n = 1, k = s ? s->n : 0;
	uint64_t end = 0;

	/* at the entry: the CFA is rsp + 8, rbp the caller's (tracepad checked the CFI says
	 * so before it planned the walk) */
	pcs[0] = r->rip;
	while (n < max) {
		uint64_t ra = word(cfa - 8, lo, &hi), rule, next;

		if (ra == tramp) {
			/* a frame whose return is followed: its real address (shadow frames run
			 * from the outermost, highest slot, to the innermost) */
			while (k && s->f[k - 1].slot < cfa - 8)
				k--;
			if (!k || s->f[k - 1].slot != cfa - 8)
				return 0;
			ra = s->f[k - 1].ret;
		}
		if (!ra) { /* as libdw: a zero return address ends the stack */
			end = TP_HK_PCS_END;
			break;
		}
		pcs[n++] = ra;
		if (n == max)
			break;
		if (!cfa_rule(ra, &rule))
			return 0;
		if (rule & TP_HK_CFA_END) {
			end = TP_HK_PCS_END;
			break;
		}
		next = ((rule & TP_HK_CFA_BP) ? rbp : cfa) + (uint64_t)(int64_t)(int32_t)rule;
		if (next <= cfa) /* frames only go up the stack */
			return 0;
		if (rule & TP_HK_CFA_BP_SAVED)
			rbp = word(next + (uint64_t)(int64_t)(int16_t)(rule >> 32), lo, &hi);
		cfa = next;
	}
	*h = (struct tp_hk_piece){end, n * 8, TP_HK_P_PCS, 0};
	return (uint32_t)sizeof(*h) + n * 8;
}

/* Plan @p's entries walk their backtrace before they copy the stack (not in a fork child:
 * its walk would read its parent's table, whose layout may differ). */
static inline int walks(const struct tp_hk_plan *p)
{
	return p->walk && p->snap > 8 && hk.cfa && hk.rs.pid == hk.ctl->pid;
}

/* walk() as plan @p asks: its frames, over the stack its copy would hold. */
static uint32_t walk_plan(const struct hstate *t, const struct tp_rt_regs *r, uint8_t *at,
			  const struct tp_hk_plan *p)
{
	return walk(t, r, at, p->walk, p->snap < TP_HK_PIECE_MAX ? p->snap : TP_HK_PIECE_MAX);
}

/* An entry's payload is the caller's address alone (tp_hk_payload_snap's last case). */
static inline int only_caller(const struct tp_hk_plan *p)
{
	return p->snap == 8 && !p->nargs && !p->nxmm && !p->stack;
}

/* A record of @nregs registers from @regs, then @pl's pieces (room for the most they can
 * take reserved, the size they took published), into the thread's ring, stamped now. */
static inline __attribute__((always_inline)) void
emit_p(struct hstate *t, uint16_t type, uint16_t flags, uint32_t func, uint32_t aux, uint64_t sp,
       const uint64_t *regs, int nregs, const struct payload *pl)
{
	struct tp_ftp_ring *ring = NULL;
	uint32_t size = TP_HK_REC_SIZE(nregs), room = pl ? tp_hk_payload_room(pl->plan, !pl->r) : 0;
	struct tp_hk_rec *h;

	if (__builtin_expect(t->w.ring < 0, 0) && claim(t))
		return;
	h = (struct tp_hk_rec *)tp_ag_ring_reserve_fast(&hk.rs, &t->w, size + room, &ring);
	if (!h) {
		__atomic_fetch_add(&hk.ctl->lost, 1, __ATOMIC_RELAXED);
		return;
	}
	if (room && pl->r && only_caller(pl->plan)) {
		/* plugins' calls whose backtraces no plugin asks for: the return address alone
		 * (hooks-args.c's piece, written here without the call) */
		struct tp_hk_piece *c = (struct tp_hk_piece *)((uint8_t *)h + size);
		uint64_t *v = (uint64_t *)(c + 1);

		*c = (struct tp_hk_piece){pl->r->rsp, 8, TP_HK_P_MEM, 0};
		*v = *(const uint64_t *)(uintptr_t)pl->r->rsp;
		if (*v == (uint64_t)(uintptr_t)&tp_hk_tramp && t->sh)
			unswap(t->sh, pl->r->rsp, v, 8);
		size += (uint32_t)sizeof(*c) + 8;
	} else if (room && pl->r) {
		const struct tp_hk_plan *p = pl->plan;
		uint64_t *snap = NULL;
		uint32_t n = tp_hk_payload_entry((uint8_t *)h + size, p, pl->r, pl->vregs), w = 0;

		size += n;
		if (walks(p))
			w = walk_plan(t, pl->r, (uint8_t *)h + size, p);
		if (!w)
			w = tp_hk_payload_snap((uint8_t *)h + size, p, pl->r, &snap);
		size += w;
		/* the stack copy holds the callers' real return addresses, for an unwinder */
		if (snap && t->sh)
			unswap(t->sh, pl->r->rsp, snap, p->snap);
	} else if (room) {
		size += tp_hk_payload_ret((uint8_t *)h + size, pl->plan, pl->rax, pl->out);
	}
	h->size = size;
	h->type = type;
	h->flags = flags;
	h->func = func;
	h->aux = aux;
	h->tsc = __builtin_ia32_rdtsc();
	h->sp = sp;
	for (int i = 0; i < nregs; i++)
		h->regs[i] = regs[i];
	__atomic_store_n(&ring->head, ring->head + size, __ATOMIC_RELEASE);
	/* a line a few records ahead, fetched for writing: tracepad read it last, on another
	 * core (as fast tracepoints do, tracept.c) */
	if (hk.prefetchw)
		__asm__ volatile("prefetchw %0" ::"m"(*((uint8_t *)h + PREFETCH_AHEAD)));
}

/* A record of @nregs registers from @regs into the thread's ring, stamped now. */
static inline void emit(struct hstate *t, uint16_t type, uint16_t flags, uint32_t func,
			uint32_t aux, uint64_t sp, const uint64_t *regs, int nregs)
{
	emit_p(t, type, flags, func, aux, sp, regs, nregs, NULL);
}

/* Events are recorded: a session is on in this process (not a fork child's copy). */
static inline __attribute__((always_inline)) int recording(struct hstate *t)
{
	if (!__atomic_load_n(&hk.on, __ATOMIC_ACQUIRE) || hk.forked)
		return 0;
	if (t->gen != hk.gen) {
		t->gen = hk.gen;
		t->w = (struct tp_ag_writer){-1, 0, 0};
		t->polls = 0;
	}
	return !(!(++t->polls & HIT_POLL) && tracer_gone());
}

/* ---- shadow stacks ---- */

/* The calling thread's shadow stack: a free one, one of an exited thread, or a new mapping
 * (raw mmap: never the program's malloc).  NULL when none can be had. */
static struct shadow *shadow_of(struct hstate *t)
{
	int32_t me, pid;
	uint32_t n;
	long p;

	if (t->sh)
		return t->sh;
	me = (int32_t)tp_raw0(SYS_gettid);
	pid = (int32_t)tp_raw0(SYS_getpid);
	n = __atomic_load_n(&hk.nshadows, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		struct shadow *s = hk.shadows[i];
		int32_t cur;

		if (!s)
			continue;
		cur = __atomic_load_n(&s->tid, __ATOMIC_ACQUIRE);
		if (cur && cur != me && tp_raw3(SYS_tgkill, pid, cur, 0) != -ESRCH)
			continue;
		if (__atomic_compare_exchange_n(&s->tid, &cur, me, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			s->n = 0;
			s->walk_sp = 0;
			return t->sh = s;
		}
	}
	n = __atomic_fetch_add(&hk.nshadows, 1, __ATOMIC_ACQ_REL);
	if (n >= SHADOWS_MAX)
		return NULL;
	p = tp_raw6(SYS_mmap, 0, sizeof(struct shadow), PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (tp_raw_failed(p))
		return NULL;
	t->sh = (struct shadow *)p;
	t->sh->tid = me;
	__atomic_store_n(&hk.shadows[n], t->sh, __ATOMIC_RELEASE);
	return t->sh;
}

/* An unwinder is about to walk the stack: every followed frame gets its real return
 * address back, so that the unwinder finds the callers' unwind tables. */
static void restore(struct hstate *t, struct shadow *s, int lossy)
{
	uint64_t tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;

	for (uint32_t i = 0; i < s->n; i++) {
		struct sframe *f = &s->f[i];

		if (!(f->flags & SF_RESTORED) && *(volatile uint64_t *)f->slot == tramp) {
			*(volatile uint64_t *)f->slot = f->ret;
			f->flags |= SF_RESTORED | (lossy ? SF_LOSSY : 0);
			if (lossy && (f->flags & SF_EVENTS) && f->gen == (uint16_t)hk.gen)
				emit(t, TP_HK_RESTORED, 0, f->func, 0, f->slot, NULL, 0);
		}
	}
}

/* The unwinder is done (the thread runs above where it started: a catch, a cleanup, or
 * the return of _Unwind_Backtrace): frames still live (slot above @sp, or at @sp for a
 * return) and holding their real address are hooked again. */
static void rehook(struct hstate *t, struct shadow *s, uint64_t sp, int at_return, int rec)
{
	uint64_t tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;

	for (uint32_t i = 0; i < s->n; i++) {
		struct sframe *f = &s->f[i];

		if ((f->flags & SF_RESTORED) && (f->slot > sp || (at_return && f->slot == sp)) &&
		    *(volatile uint64_t *)f->slot == f->ret) {
			*(volatile uint64_t *)f->slot = tramp;
			if (rec && (f->flags & SF_EVENTS) && (f->flags & SF_LOSSY) &&
			    f->gen == (uint16_t)hk.gen)
				emit(t, TP_HK_REHOOKED, 0, f->func, 0, f->slot, NULL, 0);
			f->flags &= ~(SF_RESTORED | SF_LOSSY);
		}
	}
	s->walk_sp = 0;
}

/* Frames above index @keep are gone without returning (longjmp, an exception); one whose
 * real return address was back may have returned, unless an exception is caught (@caught). */
static void drop(struct hstate *t, struct shadow *s, uint32_t keep, int rec, int caught)
{
	while (s->n > keep) {
		struct sframe *f = &s->f[--s->n];

		if (rec && (f->flags & SF_EVENTS) && f->gen == (uint16_t)hk.gen)
			emit(t, TP_HK_UNWOUND, (f->flags & SF_LOSSY) && !caught ? TP_HK_R_LOST : 0,
			     f->func, 0, f->slot, NULL, 0);
	}
}

/* ---- the entry pad and the trampoline ---- */

/* The registers function @p's ENTRY records carry (hooks-abi.h's plan.regs). */
static inline uint32_t entry_regs(const struct tp_hk_plan *p)
{
	return p->regs < TP_HK_ENTRY_REGS ? p->regs : TP_HK_ENTRY_REGS;
}

static void dl_sync(void);

static void hit(const struct tp_rt_regs *r, void *ctx)
{
	uint32_t k = (uint32_t)(uintptr_t)ctx;
	struct hstate *t = &hts;
	uint64_t tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;
	volatile uint64_t *slot = (volatile uint64_t *)r->rsp;
	struct shadow *s = t->sh;
	struct tp_hk_func *fn;
	uint32_t flags, keep;
	int rec, tail, follow;

	/* a thread's first hook: its shadow stack, which holds its mark of being inside (a
	 * fork child's thread without one has nothing to put back) */
	if (__builtin_expect(!s, 0) &&
	    (!__atomic_load_n(&hk.on, __ATOMIC_ACQUIRE) || hk.forked || !(s = shadow_of(t))))
		return;
	s->busy++;
	/* the mark before the look at hk.on: a detach either counts this thread or this sees
	 * it off */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	rec = recording(t);
	/* a fork child records nothing, but its frames hooked before the fork still need their
	 * real addresses back for an unwinder, and dead ones dropped */
	if (!rec && !(hk.forked && hk.ctl))
		goto out;
	fn = &hk.funcs[k];
	flags = fn->flags;
	if (t->in) {
		if (rec)
			__atomic_fetch_add(&hk.ctl->nested, 1, __ATOMIC_RELAXED);
		goto out;
	}
	t->in = 1;
	tail = *slot == tramp; /* a tail call of a followed frame: it returns for both */
	/* frames at or below this call's slot are gone (longjmp, exception) */
	keep = s->n;
	while (keep && (s->f[keep - 1].slot < r->rsp || (s->f[keep - 1].slot == r->rsp && !tail)))
		keep--;
	if (__builtin_expect(keep != s->n, 0))
		drop(t, s, keep, rec, !!(flags & TP_HK_F_CATCH));
	if (__builtin_expect(s->walk_sp && r->rsp > s->walk_sp, 0))
		rehook(t, s, r->rsp, 0, rec);
	if (__builtin_expect(flags & TP_HK_F_WALK, 0)) {
		restore(t, s, rec && (flags & TP_HK_F_RETURNS));
		s->walk_sp = r->rsp;
	}
	follow = rec && (flags & TP_HK_F_RET) && !tail && !(flags & TP_HK_F_WALK);
	if (follow && s->n == SHADOW_MAX) {
		__atomic_fetch_add(&hk.ctl->deep, 1, __ATOMIC_RELAXED);
		follow = 0;
	}
	if (rec && (flags & TP_HK_F_SHOWN)) {
		const uint64_t args[TP_HK_ENTRY_REGS] = {r->rdi, r->rsi, r->rdx,
							 r->rcx, r->r8,	 r->r9};
		/* rt's SIGTRAP handler runs with the vector registers reset by the kernel */
		const struct payload pl = {&fn->plan, r, 0, 0, fn->kind == TP_RT_PAD_KIND_JMP};
		uint32_t nregs = entry_regs(&fn->plan);

		emit_p(t, TP_HK_ENTRY,
		       (uint16_t)((follow ? TP_HK_R_FOLLOWED : 0) | nregs << TP_HK_R_NREGS_SHIFT),
		       k, 0, r->rsp, args, (int)nregs,
		       fn->plan.nargs || fn->plan.nxmm || fn->plan.stack || fn->plan.snap ? &pl
											  : NULL);
	}
	if (follow) {
		s->f[s->n] = (struct sframe){r->rsp,
					     *slot,
					     k,
					     (flags & TP_HK_F_SHOWN) ? SF_EVENTS : 0,
					     (uint16_t)hk.gen,
					     fn->plan.out ? r->rdi : 0};
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		s->n++;
		*slot = tramp;
	}
	if (rec && (flags & TP_HK_F_RBRK))
		dl_sync();
	t->in = 0;
out:
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	s->busy--;
}

/* What tp_hk_pad_entry (hooks-entry.S) pushed, from its stack pointer up, then what the pad
 * pushed before calling it (rt/pad.h), the program's red zone, and the program's stack at the
 * hooked entry: its return address. */
struct fast {
	uint64_t rbp, rbx;
	uint64_t args[TP_HK_ENTRY_REGS]; /* rdi, rsi, rdx, rcx, r8, r9 */
	uint64_t r10, r11, flags;
	uint64_t pad_ret, rax;
	const struct tp_rt_pad_head *site;
	uint64_t red[16];
	uint64_t ret;
};
_Static_assert(offsetof(struct fast, ret) == 240, "tp_hk_pad_entry's pushes and rt's pad's");

/* What tp_hk_enter's record carries beyond the registers (put_rec). */
enum { PL_NONE, PL_CALLER, PL_WALK };

/* tp_hk_enter's ENTRY record at @w, @all bytes in all: its header and @nregs registers from
 * @regs. */
static inline __attribute__((always_inline)) void put_head(uint64_t *w, uint32_t all,
							   uint16_t flags, uint32_t func,
							   uint64_t sp, const uint64_t *regs,
							   int nregs)
{
	/* struct tp_hk_rec's fields two by two, in 8-byte stores */
	w[0] = all | (uint64_t)TP_HK_ENTRY << 32 | (uint64_t)flags << 48;
	w[1] = func;
	w[2] = __builtin_ia32_rdtsc();
	w[3] = sp;
	switch (nregs) { /* a loop of a count known only here costs a branch a register */
	case 6:
		w[9] = regs[5];
		/* fall through */
	case 5:
		w[8] = regs[4];
		/* fall through */
	case 4:
		w[7] = regs[3];
		/* fall through */
	case 3:
		w[6] = regs[2];
		/* fall through */
	case 2:
		w[5] = regs[1];
		/* fall through */
	case 1:
		w[4] = regs[0];
		/* fall through */
	default:
		break;
	}
}

/* walk() for tp_hk_enter, out of line: the other entries keep a small frame. */
static __attribute__((noinline)) uint32_t fast_walk(const struct hstate *t, const struct fast *f,
						    uint64_t sp, uint8_t *at,
						    const struct tp_hk_plan *p)
{
	struct tp_rt_regs regs;

	/* what walk() reads of an entry's registers */
	regs.rip = f->site->addr;
	regs.rsp = sp;
	regs.rbp = f->rbp;
	return walk_plan(t, &regs, at, p);
}

/* tp_hk_enter's ENTRY record for function @fn entered with @f's registers (the stack pointer
 * @sp): @nregs argument registers, then its plan's payload when the fast path takes it (the
 * caller's address alone, or a backtrace walked), into the thread's ring (claimed already),
 * stamped now.  -1 when the ring has no room without a filler or a wait, or the walk needs a
 * stack copy instead: nothing was written then. */
static inline __attribute__((always_inline)) int put_rec(struct hstate *t, const struct fast *f,
							 uint64_t sp, uint16_t flags, uint32_t func,
							 const struct tp_hk_plan *p, int nregs,
							 int payload)
{
	struct tp_ftp_ring *r = &hk.rs.rings[t->w.ring];
	uint32_t size = TP_HK_REC_SIZE(nregs), rsize = hk.rs.size, all = size;
	uint64_t head = r->head, pos = head & (rsize - 1);
	uint64_t *w;

	if (payload == PL_CALLER)
		all += (uint32_t)sizeof(struct tp_hk_piece) + 8;
	else if (payload == PL_WALK)
		all += (uint32_t)sizeof(struct tp_hk_piece) + 8u * p->walk;
	if (__builtin_expect(pos + all > rsize || rsize - (head - t->w.tail) < all, 0))
		return -1;
	w = (uint64_t *)(void *)(hk.rs.data + (uint64_t)t->w.ring * rsize + pos);
	if (payload == PL_WALK) {
		uint32_t n = fast_walk(t, f, sp, (uint8_t *)(w + size / 8), p);

		if (!n)
			return -1;
		all = size + n;
	}
	put_head(w, all, flags, func, sp, f->args, nregs);
	if (payload == PL_CALLER) {
		uint64_t *c = w + size / 8;

		c[0] = sp; /* struct tp_hk_piece: addr; len, what; the 8 bytes */
		c[1] = 8 | (uint64_t)TP_HK_P_MEM << 32;
		c[2] = f->ret;
	}
	__atomic_store_n(&r->head, head + all, __ATOMIC_RELEASE);
	if (hk.prefetchw)
		__asm__ volatile("prefetchw %0" ::"m"(*((uint8_t *)w + PREFETCH_AHEAD)));
	return 0;
}
_Static_assert(offsetof(struct tp_hk_rec, type) == 4 && offsetof(struct tp_hk_rec, flags) == 6 &&
		   offsetof(struct tp_hk_rec, func) == 8 && offsetof(struct tp_hk_rec, aux) == 12 &&
		   offsetof(struct tp_hk_rec, tsc) == 16 && offsetof(struct tp_hk_rec, sp) == 24 &&
		   offsetof(struct tp_hk_rec, regs) == 32 && sizeof(struct tp_hk_piece) == 16 &&
		   offsetof(struct tp_hk_piece, len) == 8 &&
		   offsetof(struct tp_hk_piece, what) == 12,
	       "put_rec's words");

int tp_hk_enter(struct fast *f) TP_HIDDEN;

/* The entry of a hooked function, as hit() does it, for the common case alone: a thread
 * recording, with a shadow stack and a ring, outside any hook, a function whose records carry
 * no payload but the caller's address or a walked backtrace, no frame to drop or put back, no
 * tail call.  0 when done, else 1: nothing was
 * changed and hit() runs on rt's full register record. */
int tp_hk_enter(struct fast *f)
{
	struct hstate *t = &hts;
	struct shadow *s = t->sh;
	uint64_t rsp = (uint64_t)(uintptr_t)&f->ret, tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;
	const struct tp_hk_func *fn;
	uint32_t k, flags, n;
	int pl;

	if (__builtin_expect(!s || t->in, 0))
		return 1;
	s->busy++;
	/* the mark before the look at hk.on, as in hit() */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	/* a site unlinked since this thread entered its pad calls nothing (rt/pad.h) */
	if (!__atomic_load_n(&f->site->fn, __ATOMIC_ACQUIRE) ||
	    !__atomic_load_n(&hk.on, __ATOMIC_ACQUIRE) || hk.forked || t->gen != hk.gen ||
	    !((t->polls + 1) & HIT_POLL) || t->w.ring < 0)
		goto slow;
	k = (uint32_t)(uintptr_t)__atomic_load_n(&f->site->ctx, __ATOMIC_RELAXED);
	fn = &hk.funcs[k];
	flags = fn->flags;
	n = s->n;
	/* plugins' calls carry their caller's address, or a backtrace the agent walks (hit()'s
	 * emit_p() says when); a stack copy or argument memory is hit()'s */
	pl = PL_NONE;
	if (fn->plan.nargs || fn->plan.nxmm || fn->plan.stack)
		goto slow;
	if (only_caller(&fn->plan))
		pl = PL_CALLER;
	else if (walks(&fn->plan))
		pl = PL_WALK;
	else if (fn->plan.snap)
		goto slow;
	if ((flags & ~(uint32_t)(TP_HK_F_SHOWN | TP_HK_F_RET)) || fn->plan.out || f->ret == tramp ||
	    (n && s->f[n - 1].slot <= rsp) || s->walk_sp || n == SHADOW_MAX)
		goto slow;
	t->in = 1;
	if ((flags & TP_HK_F_SHOWN) &&
	    put_rec(t, f, rsp,
		    (uint16_t)(((flags & TP_HK_F_RET) ? TP_HK_R_FOLLOWED : 0) |
			       entry_regs(&fn->plan) << TP_HK_R_NREGS_SHIFT),
		    k, &fn->plan, (int)entry_regs(&fn->plan), pl)) {
		t->in = 0;
		goto slow;
	}
	t->polls++;
	if (flags & TP_HK_F_RET) {
		s->f[n] = (struct sframe){
		    rsp, f->ret, k, (flags & TP_HK_F_SHOWN) ? SF_EVENTS : 0, (uint16_t)hk.gen, 0};
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		s->n = n + 1;
		*(volatile uint64_t *)(uintptr_t)rsp = tramp;
	}
	t->in = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	s->busy--;
	return 0;
slow:
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	s->busy--;
	return 1;
}

/* Called by the trampoline with the stack pointer after the ret (the frame's slot + 8) and
 * the return registers, for every case but the common one, which the trampoline does itself
 * (hooks-entry.S: the innermost frame returns in a thread recording outside any hook, no
 * payload, room in its ring); answers the real return address. */
uint64_t tp_hk_ret(uint64_t sp, uint64_t rax, uint64_t rdx)
{
	struct hstate *t = &hts;
	struct shadow *s = t->sh;
	uint64_t slot = sp - 8, ret;
	uint32_t in = t->in;
	int k, rec;

	if (!s)
		__builtin_trap(); /* no frame of ours could have come here */
	t->in = 1;
	s->busy++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	rec = recording(t) && hk.ctl;
	if (__builtin_expect(s->walk_sp && sp > s->walk_sp, 0))
		rehook(t, s, sp, 1, rec);
	for (k = (int)s->n - 1; k >= 0; k--)
		if (s->f[k].slot == slot && !(s->f[k].flags & SF_RESTORED))
			break;
	if (k < 0)
		__builtin_trap(); /* the shadow stack lost this frame: a bug */
	if (__builtin_expect((uint32_t)k + 1 != s->n, 0))
		drop(t, s, (uint32_t)k + 1, rec, 0);
	if (rec && (s->f[k].flags & SF_EVENTS) && s->f[k].gen == (uint16_t)hk.gen) {
		const uint64_t v[TP_HK_RETURN_REGS] = {rax, rdx};
		int32_t e = 0;

		/* errno as the function left it: libc's TLS, at the thread pointer's offset
		 * tracepad found (the ptrace engine's errno_tpoff) */
		if (hk.errno_ok)
			__asm__ volatile("movl %%fs:(%1), %0" : "=r"(e) : "r"(hk.errno_tpoff));
		const struct tp_hk_plan *plan = &hk.funcs[s->f[k].func].plan;
		const struct payload pl = {plan, NULL, rax, s->f[k].out, 1};

		emit_p(t, TP_HK_RETURN, hk.errno_ok ? TP_HK_R_ERRNO : 0, s->f[k].func, (uint32_t)e,
		       slot, v, TP_HK_RETURN_REGS, plan->ret || plan->out ? &pl : NULL);
	}
	ret = s->f[k].ret;
	s->n = (uint32_t)k;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	s->busy--;
	t->in = in;
	return ret;
}

/* ---- sessions ---- */

static void in_child(void)
{
	struct hstate *t = &hts;

	/* the forking thread's shadow stack (a copy) is the child's thread's now */
	if (t->sh)
		__atomic_store_n(&t->sh->tid, (int32_t)tp_raw0(SYS_gettid), __ATOMIC_RELEASE);
	/* -f: the child records into the rings of the block it shares, as a process of its
	 * own (its rings say its pid), its frames hooked before the fork returning there */
	if (hk.ctl && hk.ctl->follow && !hk.forked) {
		hk.rs.pid = (int32_t)tp_raw0(SYS_getpid);
		t->w = (struct tp_ag_writer){-1, 0, 0};
		t->polls = 0;
		return;
	}
	/* else it keeps the pads and its frames' trampolines: it records nothing */
	hk.forked = 1;
	if (hk.ctl)
		__atomic_or_fetch(&hk.ctl->state, TP_HK_ST_FORKED, __ATOMIC_RELAXED);
}

static void unmap(void)
{
	tp_raw2(SYS_munmap, hk.ctl, (long)hk.size);
	hk.ctl = NULL;
	hk.cfa = NULL;
}

static int inside(uint64_t off, uint64_t len)
{
	return off >= sizeof(struct tp_hk_ctl) && off + len >= off && off + len <= hk.size;
}

static int check(void)
{
	struct tp_hk_ctl *c = hk.ctl;

	if (c->funcs_cap < c->nfuncs)
		c->funcs_cap = c->nfuncs;
	if (c->funcs_cap > TP_HK_MAX_FUNCS || !c->nrings || c->ring_size < 4096 ||
	    (c->ring_size & (c->ring_size - 1)) ||
	    !inside(c->funcs_off, (uint64_t)c->funcs_cap * sizeof(struct tp_hk_func)) ||
	    !inside(c->rings_off, (uint64_t)c->nrings * sizeof(struct tp_ftp_ring)) ||
	    !inside(c->data_off, (uint64_t)c->nrings * c->ring_size) || (c->data_off & 7) ||
	    !inside(c->cfa_off, TP_HK_CFA_SLOTS * sizeof(struct tp_hk_cfa)) || (c->cfa_off & 15))
		return -1;
	hk.funcs = (struct tp_hk_func *)((uint8_t *)c + c->funcs_off);
	hk.cfa = (const struct tp_hk_cfa *)((uint8_t *)c + c->cfa_off);
	hk.rs = (struct tp_ag_rings){(struct tp_ftp_ring *)((uint8_t *)c + c->rings_off),
				     (uint8_t *)c + c->data_off,
				     c->nrings,
				     c->ring_size,
				     0,
				     tracer_gone};
	return 0;
}

static void say(const char *m)
{
	int n;

	for (n = 0; m[n] && n < (int)sizeof(hk.ctl->error) - 1; n++)
		hk.ctl->error[n] = m[n];
	hk.ctl->error[n] = 0;
}

/* Take tracepad's block (its fd @fd, opened through /proc/@tracer/fd) and get ready; other
 * threads may run.  0, -1 (no block), -2 (refused: ctl->error), -3 (a session is under
 * way). */
__attribute__((visibility("default"))) int tracepad_hooks_attach(int tracer, int fd)
{
	struct tp_hk_ctl *c;
	long p;

	if (hk.ctl && (!tracer_gone() || tracepad_hooks_detach()))
		return -3;
	p = tp_agent_map_block(tracer, fd, "/memfd:tracepad-hooks", TP_HK_MAGIC, TP_HK_ABI,
			       &hk.size);
	if (p == -1)
		return -1;
	hk.ctl = (struct tp_hk_ctl *)p;
	if (check()) {
		unmap();
		return -2;
	}
	c = hk.ctl;
	c->pid = (int32_t)tp_raw0(SYS_getpid);
	hk.rs.pid = c->pid;
	hk.errno_ok = c->errno_ok;
	hk.errno_tpoff = c->errno_tpoff;
	{
		uint32_t a, b, cx, d;

		/* CPUID.80000001H:ECX.PRFCHW */
		__asm__ volatile("cpuid"
				 : "=a"(a), "=b"(b), "=c"(cx), "=d"(d)
				 : "a"(0x80000001u), "c"(0));
		hk.prefetchw = (cx >> 8) & 1;
	}
	c->tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;
	c->install_pc = (uint64_t)(uintptr_t)&tracepad_hooks_install;
	c->detach_pc = (uint64_t)(uintptr_t)&tracepad_hooks_detach;
	if (!hk.atfork && __register_atfork(NULL, NULL, in_child, &hk) == 0)
		hk.atfork = 1;
	if (tp_zydis_load() || tp_zydis_own_libc() || tp_rt_mem_guard_install() ||
	    tp_rt_trap_chain()) {
		say("cannot load libZydis, or install the fault guard or the SIGTRAP handler");
		tp_rt_mem_guard_remove();
		unmap();
		return -2;
	}
	hk.forked = 0;
	hk.npads = 0;
	__atomic_add_fetch(&hk.gen, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* Place the pads of functions [@lo, @hi): no thread runs their code (stopped, or a
 * dlopen'ed object not yet relocated).  Returns how many failed. */
static int place(uint32_t lo, uint32_t hi)
{
	int bad = 0;

	for (uint32_t i = 0; i < hi; i++)
		hk.addrs[i] = hk.funcs[i].addr;
	for (uint32_t i = lo; i < hi; i++) {
		struct tp_hk_func *f = &hk.funcs[i];
		/* every other hooked entry is a branch target no jmp may cover */
		struct tp_rt_pad_where w = {f->fn_lo, f->fn_hi, f->pad_hi, hk.addrs, hi};
		struct tp_rt_pad *pad = NULL;
		/* without the function's bounds, a jmp could cover the next function's first
		 * bytes (and the relocator would ask the loader, whose lock a stopped thread may
		 * hold): the int3 path */
		int err = tp_rt_pad_install_entry(f->addr, hit, (void *)(uintptr_t)i,
						  TP_RT_PAD_STOPPED | TP_RT_PAD_UNCOUNTED |
						      (f->fn_hi ? 0 : TP_RT_PAD_TRAP),
						  &w, tp_hk_pad_entry, &pad);

		f->err = err;
		hk.pads[i] = err ? NULL : pad;
		if (err) {
			bad++;
			continue;
		}
		f->kind = tp_rt_pad_kind(pad);
		f->why = tp_rt_pad_why(pad);
		f->covered = (uint32_t)tp_rt_pad_covered(pad);
		f->ninsn = (uint32_t)tp_rt_pad_layout(pad, f->ioff, f->icopy, TP_FTP_MAX_INSNS);
	}
	return bad;
}

/* The loader is consistent again after a dlopen or a dlclose (the pad at r_brk, in the
 * thread that holds the loader's lock): tracepad appends the functions of the new objects
 * and flags those of the objects gone, whose pads are dropped (their code is unmapped),
 * and the new ones are placed before the new object's code can run (it is not even
 * relocated yet).  Only in the process that took the block (not in a fork child). */
static void dl_sync(void)
{
	struct tp_hk_ctl *c = hk.ctl;
	int32_t state = -1;
	uint32_t seq, n;

	if (!c->rdebug || hk.rs.pid != c->pid ||
	    tp_rt_mem_read_fast(c->rdebug + offsetof(struct r_debug, r_state), &state, 4) ||
	    state != RT_CONSISTENT)
		return;
	__atomic_store_n(&hk.dl_busy, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&hk.on, __ATOMIC_SEQ_CST))
		goto out; /* a detach came first */
	seq = __atomic_add_fetch(&c->dl_seq, 1, __ATOMIC_SEQ_CST);
	for (;;) {
		uint32_t done = __atomic_load_n(&c->dl_done, __ATOMIC_ACQUIRE);
		struct timespec ts = {0, 1000000};

		if ((int32_t)(done - seq) >= 0)
			break;
		if (!__atomic_load_n(&hk.on, __ATOMIC_SEQ_CST) || tracer_gone())
			goto out;
		tp_raw4(SYS_futex, &c->dl_done, FUTEX_WAIT, done, &ts);
	}
	n = __atomic_load_n(&c->nfuncs, __ATOMIC_ACQUIRE);
	if (n > c->funcs_cap || n < hk.npads)
		goto out;
	for (uint32_t i = 0; i < hk.npads; i++)
		if ((hk.funcs[i].flags & TP_HK_F_GONE) && hk.pads[i]) {
			tp_rt_pad_forget(hk.pads[i]);
			hk.pads[i] = NULL;
		}
	place(hk.npads, n);
	hk.npads = n;
out:
	__atomic_store_n(&hk.dl_busy, 0, __ATOMIC_SEQ_CST);
}

/* Place every pad, the other threads stopped by tracepad (which then moves any whose pc lies
 * on an inner boundary of a jmp site: ioff/icopy).  Returns how many failed (their err says
 * why); the others are live. */
__attribute__((visibility("default"))) int tracepad_hooks_install(void)
{
	struct tp_hk_ctl *c = hk.ctl;
	int bad;

	if (!c)
		return -1;
	/* on once every pad is placed: the placing code's own calls of hooked functions (libZydis
	 * calls memcpy) are no events */
	bad = place(0, c->nfuncs);
	hk.npads = c->nfuncs;
	__atomic_store_n(&hk.on, 1, __ATOMIC_RELEASE);
	__atomic_or_fetch(&c->state, TP_HK_ST_ACTIVE, __ATOMIC_RELEASE);
	return bad;
}

/* End the session, the other threads stopped: every byte back (at the first call), then the
 * number of threads still inside a hook (tracepad lets them run and calls again), or 0 once
 * the block is unmapped.  Frames hooked before go on returning through the trampoline and
 * the shadow stacks, which stay. */
__attribute__((visibility("default"))) long tracepad_hooks_detach(void)
{
	long busy;

	if (!hk.ctl)
		return 0;
	__atomic_store_n(&hk.on, 0, __ATOMIC_SEQ_CST);
	/* it may hold rt's lock: asked again once it is out */
	if (__atomic_load_n(&hk.dl_busy, __ATOMIC_SEQ_CST))
		return 1;
	busy = 0;
	for (uint32_t i = 0; i < __atomic_load_n(&hk.nshadows, __ATOMIC_ACQUIRE) && i < SHADOWS_MAX;
	     i++)
		if (hk.shadows[i] && hk.shadows[i]->busy)
			busy++;
	for (uint32_t i = 0; i < hk.npads; i++) {
		if (hk.pads[i])
			tp_rt_pad_unlink(hk.pads[i]);
		if (hk.pads[i])
			busy += (long)tp_rt_pad_busy(hk.pads[i]);
	}
	if (busy)
		return busy;
	hk.npads = 0;
	tp_rt_mem_guard_remove();
	unmap();
	return 0;
}
