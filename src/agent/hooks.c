/* Call hooks in the agent (`tracepad calls --engine agent`): a jump pad on each selected
 * function's entry records the call into the thread's ring and swaps the return address for
 * the return trampoline (hooks-entry.S), which records the return and goes back to the real
 * caller through the thread's shadow stack.  The shadow stacks live in the agent's own
 * mappings, not in tracepad's block: a frame hooked before a detach still returns through
 * them.  Built -mgeneral-regs-only: the pads and the trampoline keep no vector state.
 * Design (longjmp, exceptions, unwinders, threads): docs/INTERNALS.md, "Call hooks". */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agent/agent-priv.h"
#include "agent/hooks-abi.h"
#include "agent/ring.h"
#include "rt/pad.h"

/* Frames a thread's shadow stack follows at most: deeper calls are recorded, their returns
 * not (ctl->deep). */
#define SHADOW_MAX 8192
#define SHADOWS_MAX 4096 /* threads of a process with a shadow stack at once */
#define HIT_POLL 0xffff	 /* hooked calls of a thread between two looks for tracepad */

int tracepad_hooks_attach(int tracer, int fd);
int tracepad_hooks_install(void);
long tracepad_hooks_detach(void);
void tp_hk_tramp(void) TP_HIDDEN;
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
};
#define SF_EVENTS 0x1	/* its return (or unwinding) is an event */
#define SF_RESTORED 0x2 /* the real address is back in the slot, for an unwinder */
#define SF_LOSSY 0x4	/* by an unwinder that returns: the frame may return unseen */

struct shadow {
	int32_t tid; /* its thread; 0: free */
	uint32_t n;
	/* its thread is in the trampoline's use of the block: a plain store, read by the detach
	 * with every other thread stopped (a stop orders its stores), so no locked add */
	volatile uint32_t busy;
	uint32_t pad;
	uint64_t walk_sp; /* an unwinder started below this: frames put back until it is over */
	struct sframe f[SHADOW_MAX];
};

static struct {
	struct tp_hk_ctl *ctl;
	uint64_t size;
	struct tp_hk_func *funcs;
	struct tp_ag_rings rs;
	uint32_t gen;
	int on, forked, atfork;
	struct tp_rt_pad *pads[TP_HK_MAX_FUNCS];
	uint64_t addrs[TP_HK_MAX_FUNCS];
	uint32_t npads;
	struct shadow *shadows[SHADOWS_MAX];
	uint32_t nshadows;
} hk;

struct hstate {
	uint32_t gen;
	uint32_t polls;
	struct tp_ag_writer w;
	/* kept across sessions: a frame hooked in an earlier one still returns through it */
	struct shadow *sh;
	uint32_t in; /* inside a hook: a signal handler's hooked calls are not followed */
};
static __thread struct hstate hts __attribute__((tls_model("initial-exec")));

/* ---- rings ---- */

static int tracer_gone(void)
{
	int t = hk.ctl->tracer_pid;

	if (t <= 0 || tp_raw2(SYS_kill, t, 0) != -ESRCH)
		return 0;
	__atomic_store_n(&hk.on, 0, __ATOMIC_RELEASE);
	return 1;
}

static void emit(struct hstate *t, uint16_t type, uint16_t flags, uint32_t func, uint64_t sp,
		 const uint64_t *regs, int nregs)
{
	struct tp_ftp_ring *ring = NULL;
	struct tp_hk_rec *h;

	if (!tp_ag_ring_own(&hk.rs, &t->w)) {
		__atomic_fetch_add(&hk.ctl->no_ring, 1, __ATOMIC_RELAXED);
		return;
	}
	h = (struct tp_hk_rec *)tp_ag_ring_reserve(&hk.rs, &t->w, sizeof(*h), &ring);
	if (!h) {
		__atomic_fetch_add(&hk.ctl->lost, 1, __ATOMIC_RELAXED);
		return;
	}
	h->size = sizeof(*h);
	h->type = type;
	h->flags = flags;
	h->tid = t->w.tid;
	h->func = func;
	h->tsc = __builtin_ia32_rdtsc();
	h->sp = sp;
	for (int i = 0; i < 6; i++)
		h->regs[i] = i < nregs ? regs[i] : 0;
	__atomic_store_n(&ring->head, ring->head + sizeof(*h), __ATOMIC_RELEASE);
}

/* Events are recorded: a session is on in this process (not a fork child's copy). */
static int recording(struct hstate *t)
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
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tp_raw_failed(p))
		return NULL;
	t->sh = (struct shadow *)p;
	t->sh->tid = me;
	__atomic_store_n(&hk.shadows[n], t->sh, __ATOMIC_RELEASE);
	return t->sh;
}

/* An unwinder is about to walk the stack: every followed frame gets its real return
 * address back, so that the unwinder finds the callers' unwind tables. */
static void emit(struct hstate *t, uint16_t type, uint16_t flags, uint32_t func, uint64_t sp,
		 const uint64_t *regs, int nregs);
static void restore(struct hstate *t, struct shadow *s, int lossy)
{
	uint64_t tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;

	for (uint32_t i = 0; i < s->n; i++) {
		struct sframe *f = &s->f[i];

		if (!(f->flags & SF_RESTORED) && *(volatile uint64_t *)f->slot == tramp) {
			*(volatile uint64_t *)f->slot = f->ret;
			f->flags |= SF_RESTORED | (lossy ? SF_LOSSY : 0);
			if (lossy && (f->flags & SF_EVENTS) && f->gen == (uint16_t)hk.gen)
				emit(t, TP_HK_RESTORED, 0, f->func, f->slot, NULL, 0);
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
				emit(t, TP_HK_REHOOKED, 0, f->func, f->slot, NULL, 0);
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
			     f->func, f->slot, NULL, 0);
	}
}

/* ---- the entry pad and the trampoline ---- */

static void hit(const struct tp_rt_regs *r, void *ctx)
{
	uint32_t k = (uint32_t)(uintptr_t)ctx;
	struct hstate *t = &hts;
	uint64_t tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;
	volatile uint64_t *slot = (volatile uint64_t *)r->rsp;
	struct tp_hk_func *fn;
	struct shadow *s;
	uint32_t flags, keep;
	int rec, tail, follow;

	rec = recording(t);
	/* a fork child records nothing, but its frames hooked before the fork still need their
	 * real addresses back for an unwinder, and dead ones dropped */
	if (!rec && !(hk.forked && t->sh && hk.ctl))
		return;
	fn = &hk.funcs[k];
	flags = fn->flags;
	if (t->in) {
		__atomic_fetch_add(&hk.ctl->nested, 1, __ATOMIC_RELAXED);
		return;
	}
	t->in = 1;
	s = shadow_of(t);
	tail = *slot == tramp; /* a tail call of a followed frame: it returns for both */
	if (s) {
		/* frames at or below this call's slot are gone (longjmp, exception) */
		keep = s->n;
		while (keep &&
		       (s->f[keep - 1].slot < r->rsp || (s->f[keep - 1].slot == r->rsp && !tail)))
			keep--;
		drop(t, s, keep, rec, !!(flags & TP_HK_F_CATCH));
		if (s->walk_sp && r->rsp > s->walk_sp)
			rehook(t, s, r->rsp, 0, rec);
		if (flags & TP_HK_F_WALK) {
			restore(t, s, rec && (flags & TP_HK_F_RETURNS));
			s->walk_sp = r->rsp;
		}
	}
	follow = rec && (flags & TP_HK_F_RET) && s && !tail && !(flags & TP_HK_F_WALK);
	if (follow && s->n == SHADOW_MAX) {
		__atomic_fetch_add(&hk.ctl->deep, 1, __ATOMIC_RELAXED);
		follow = 0;
	}
	if (rec && (flags & TP_HK_F_SHOWN)) {
		const uint64_t args[6] = {r->rdi, r->rsi, r->rdx, r->rcx, r->r8, r->r9};

		emit(t, TP_HK_ENTRY, follow ? TP_HK_R_FOLLOWED : 0, k, r->rsp, args, 6);
	}
	if (follow) {
		s->f[s->n] = (struct sframe){
		    r->rsp, *slot, k, (flags & TP_HK_F_SHOWN) ? SF_EVENTS : 0, (uint16_t)hk.gen};
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		s->n++;
		*slot = tramp;
	}
	t->in = 0;
}

/* Called by the trampoline with the stack pointer after the ret (the frame's slot + 8) and
 * the return registers; answers the real return address. */
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
	s->busy = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	rec = recording(t) && hk.ctl;
	if (s->walk_sp && sp > s->walk_sp)
		rehook(t, s, sp, 1, rec);
	for (k = (int)s->n - 1; k >= 0; k--)
		if (s->f[k].slot == slot && !(s->f[k].flags & SF_RESTORED))
			break;
	if (k < 0)
		__builtin_trap(); /* the shadow stack lost this frame: a bug */
	drop(t, s, (uint32_t)k + 1, rec, 0);
	if (rec && (s->f[k].flags & SF_EVENTS) && s->f[k].gen == (uint16_t)hk.gen) {
		uint64_t v[3] = {rax, rdx, 0};
		int64_t off = hk.ctl->errno_tpoff;
		int32_t e = 0;

		/* errno as the function left it: libc's TLS, at the thread pointer's offset
		 * tracepad found (the ptrace engine's errno_tpoff) */
		if (hk.ctl->errno_ok) {
			__asm__ volatile("movl %%fs:(%1), %0" : "=r"(e) : "r"(off));
			v[2] = (uint32_t)e;
		}
		emit(t, TP_HK_RETURN, hk.ctl->errno_ok ? TP_HK_R_ERRNO : 0, s->f[k].func, slot, v,
		     3);
	}
	ret = s->f[k].ret;
	s->n = (uint32_t)k;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	s->busy = 0;
	t->in = in;
	return ret;
}

/* ---- sessions ---- */

static void in_child(void)
{
	/* a forked child keeps the pads and its frames' trampolines: it records nothing */
	hk.forked = 1;
	if (hk.ctl)
		__atomic_or_fetch(&hk.ctl->state, TP_HK_ST_FORKED, __ATOMIC_RELAXED);
}

static void unmap(void)
{
	tp_raw2(SYS_munmap, hk.ctl, (long)hk.size);
	hk.ctl = NULL;
}

static int inside(uint64_t off, uint64_t len)
{
	return off >= sizeof(struct tp_hk_ctl) && off + len >= off && off + len <= hk.size;
}

static int check(void)
{
	struct tp_hk_ctl *c = hk.ctl;

	if (c->nfuncs > TP_HK_MAX_FUNCS || !c->nrings || c->ring_size < 4096 ||
	    (c->ring_size & (c->ring_size - 1)) ||
	    !inside(c->funcs_off, (uint64_t)c->nfuncs * sizeof(struct tp_hk_func)) ||
	    !inside(c->rings_off, (uint64_t)c->nrings * sizeof(struct tp_ftp_ring)) ||
	    !inside(c->data_off, (uint64_t)c->nrings * c->ring_size) || (c->data_off & 7))
		return -1;
	hk.funcs = (struct tp_hk_func *)((uint8_t *)c + c->funcs_off);
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
	c->tramp = (uint64_t)(uintptr_t)&tp_hk_tramp;
	c->install_pc = (uint64_t)(uintptr_t)&tracepad_hooks_install;
	c->detach_pc = (uint64_t)(uintptr_t)&tracepad_hooks_detach;
	if (!hk.atfork && __register_atfork(NULL, NULL, in_child, &hk) == 0)
		hk.atfork = 1;
	if (tp_zydis_load() || tp_rt_mem_guard_install() || tp_rt_trap_chain()) {
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

/* Place every pad, the other threads stopped by tracepad (which then moves any whose pc lies
 * on an inner boundary of a jmp site: ioff/icopy).  Returns how many failed (their err says
 * why); the others are live. */
__attribute__((visibility("default"))) int tracepad_hooks_install(void)
{
	struct tp_hk_ctl *c = hk.ctl;
	int bad = 0;

	if (!c)
		return -1;
	for (uint32_t i = 0; i < c->nfuncs; i++)
		hk.addrs[i] = hk.funcs[i].addr;
	/* on once every pad is placed: the placing code's own calls of hooked functions (libZydis
	 * calls memcpy) are no events */
	for (uint32_t i = 0; i < c->nfuncs; i++) {
		struct tp_hk_func *f = &hk.funcs[i];
		/* every other hooked entry is a branch target no jmp may cover */
		struct tp_rt_pad_where w = {f->fn_lo, f->fn_hi, f->pad_hi, hk.addrs, c->nfuncs};
		struct tp_rt_pad *pad = NULL;
		/* without the function's bounds, a jmp could cover the next function's first
		 * bytes (and the relocator would ask the loader, whose lock a stopped thread may
		 * hold): the int3 path */
		int err = tp_rt_pad_install(f->addr, hit, (void *)(uintptr_t)i,
					    TP_RT_PAD_STOPPED | (f->fn_hi ? 0 : TP_RT_PAD_TRAP), &w,
					    &pad);

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
