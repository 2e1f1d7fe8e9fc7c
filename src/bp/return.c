/* Hooked returns: per-thread shadow stacks of calls in flight whose return address was
 * replaced by the trampoline or a stub, the breakpoint hit itself, and calls injected
 * with the trampoline as their return. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "bp/bp-priv.h"
#include "proc/inject.h"

struct shadow *tp_bp_shadow_of(struct tp_bps *b, pid_t tid, bool create)
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

int tp_bp_shadow_reserve(struct shadow *s, unsigned n)
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

int tp_bp_site_plant(struct tp_bps *b, pid_t tid, uint64_t at)
{
	struct bp *bp = tp_bp_find(b, at);
	int r;

	if (!bp) {
		r = tp_bp_insert(b, tid, at, 0);
		if (r)
			return r;
		bp = tp_bp_find(b, at);
		bp->entry = false; /* its hits are no entries, only returns */
	}
	bp->retsite = true;
	return 0;
}

/* Entry of a function that reads its return address (@ret, at @sp): it stays in place, the
 * return is caught at a breakpoint there.  A hooked function that tail-called it has its
 * hook in that slot: the real address goes back and that frame's return is caught at the
 * same site.  *@no_return: no breakpoint could go there. */
static int hook_site(struct tp_bps *b, pid_t tid, struct shadow *s, uint64_t sp, uint64_t ret,
		     uint64_t func, bool *no_return)
{
	struct frame *top = s->n ? &s->f[s->n - 1] : NULL;
	int r;

	if (top && top->sp == sp && top->slot != SLOT_SITE) {
		r = tp_proc_write(b->pid, sp, &top->ret, sizeof(top->ret));
		if (r)
			return r;
		if (top->slot >= 0 && !top->borrowed)
			tp_bp_slot_put(b, (uint32_t)top->slot);
		top->slot = SLOT_SITE;
		ret = top->ret;
		if (tp_bp_site_plant(b, tid, ret)) {
			/* Its return cannot be seen any more: the frame goes as unwound. */
			top->unhooked = true;
			tp_bp_drop_top(b, s);
			*no_return = true;
			return 0;
		}
	}
	/* Both calls of a tail call return at once: their frames wait at the same site. */
	if (tp_bp_site_plant(b, tid, ret)) {
		*no_return = true;
		return 0;
	}
	s->f[s->n++] = (struct frame){.sp = sp, .ret = ret, .func = func, .slot = SLOT_SITE};
	return 0;
}

/* Entry of a TP_BP_RETURN function: the return address at [sp] goes to the shadow stack,
 * a stub's address (@async and one is free) or the trampoline's takes its place; or, for a
 * function that reads it (@site), it stays and the return site gets a breakpoint.
 * @regs: the entry's registers. */
static int hook_return(struct tp_bps *b, pid_t tid, const struct user_regs_struct *regs,
		       uint64_t func, bool async, bool site, bool *no_return, uint64_t *run_at)
{
	struct shadow *s = tp_bp_shadow_of(b, tid, true);
	uint64_t sp = regs->rsp, ret = 0;
	int32_t slot = SLOT_TRAMP;
	int r;

	if (!s)
		return -ENOMEM;
	r = b->amap ? tp_bp_reap_frames(b, tid, s, sp, true, false, sp, &ret)
		    : (tp_proc_read(b->pid, sp, &ret, sizeof(ret)) == sizeof(ret) ? 0 : -EFAULT);
	if (r)
		return r;
	/* Frames below this call's are gone (longjmp, exceptions, exit of a thread's
	 * function without returning): a new call never sits above a live one.  At an equal
	 * sp, a tail call from a hooked function finds its hook as its return address;
	 * anything else there means the frame's call is gone too. */
	while (s->n && (s->f[s->n - 1].sp < sp ||
			(s->f[s->n - 1].sp == sp && ret != tp_bp_hook_of(b, &s->f[s->n - 1]))))
		tp_bp_drop_top(b, s);
	r = tp_bp_shadow_reserve(s, s->n + 1);
	if (r)
		return r;
	if (site)
		return hook_site(b, tid, s, sp, ret, func, no_return);
	if (async && b->ret_fn)
		slot = tp_bp_slot_get(b, tid);
	if (slot >= 0) {
		uint64_t stub = tp_bp_stub_at(b, (uint32_t)slot),
			 rec = tp_bp_rec_at(b, (uint32_t)slot);
		/* done, ret, errno_at, entry_to, entry_tsc: the thread runs on through the
		 * entry stub, which stamps the call's start */
		uint64_t head[5] = {0, ret, rec + TP_RSTUB_ERRNO, *run_at, 0};
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
			tp_bp_slot_put(b, (uint32_t)slot);
			slot = SLOT_TRAMP;
		} else {
			*run_at = stub + STUB_ENTRY;
		}
	}
	if (slot == SLOT_TRAMP) {
		r = tp_proc_write(b->pid, sp, &b->tramp, sizeof(b->tramp));
		if (r)
			return r;
	}
	s->f[s->n++] = (struct frame){.sp = sp, .ret = ret, .func = func, .slot = slot};
	return 0;
}

/* The trampoline's int3: the return went through it with sp = frame sp + 8. */
int tp_bp_unhook_return(struct tp_bps *b, pid_t tid, uint64_t sp, struct tp_bp_stop *out)
{
	struct shadow *s = tp_bp_shadow_of(b, tid, false);
	struct frame f;

	if (!s)
		return -ENOENT;
	if (b->amap)
		tp_bp_reap_frames(b, tid, s, sp - 9, true, false, 0, NULL);
	while (s->n && s->f[s->n - 1].sp < sp - 8)
		tp_bp_drop_top(b, s);
	if (s->n && s->f[s->n - 1].sp == sp - 8) {
		f = s->f[--s->n];
	} else {
		/* Not on the stack: a frame dropped too early, if it is still known. */
		unsigned k, last = s->ngrave < GRAVE ? s->ngrave : GRAVE;

		for (k = 0; k < last; k++)
			if (s->grave[(s->ngrave - 1 - k) % GRAVE].sp == sp - 8 &&
			    s->grave[(s->ngrave - 1 - k) % GRAVE].slot == SLOT_TRAMP)
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

/* At return site @at, with the thread's registers @regs: is it a call's return caught
 * there (its frame at sp - 8 waits for @at)?  1 with *@out filled, 0, or -errno. */
static int site_return(struct tp_bps *b, pid_t tid, const struct user_regs_struct *regs,
		       uint64_t at, struct tp_bp_stop *out)
{
	struct shadow *s = tp_bp_shadow_of(b, tid, false);
	uint64_t sp = regs->rsp;
	unsigned i;
	struct frame f;

	/* Frames of calls returned through their stubs may sit above it, not yet reaped. */
	for (i = s ? s->n : 0; i-- > 0 && s->f[i].sp <= sp - 8;)
		if (s->f[i].sp == sp - 8 && s->f[i].slot == SLOT_SITE && s->f[i].ret == at)
			break;
	if (!s || i == UINT_MAX || s->f[i].sp != sp - 8 || s->f[i].slot != SLOT_SITE ||
	    s->f[i].ret != at)
		return 0; /* passed by in another way: nothing is dropped */
	if (b->amap)
		tp_bp_reap_frames(b, tid, s, sp - 9, true, false, 0, NULL);
	while (s->n > i + 1)
		tp_bp_drop_top(b, s);
	f = s->f[--s->n];
	*out = (struct tp_bp_stop){.kind = TP_BP_STOP_RETURN,
				   .func = f.func,
				   .sp = f.sp,
				   .ret_addr = f.ret,
				   .rax = regs->rax,
				   .rdx = regs->rdx,
				   .depth = s->n};
	return 1;
}

int tp_bp_hit(struct tp_bps *bps, pid_t tid, const struct user_regs_struct *regs, unsigned flags,
	      struct tp_bp_stop *out)
{
	struct user_regs_struct own;
	struct tp_bp_stop st = {0};
	struct shadow *s;
	struct bp *bp;
	uint64_t pc, slot;
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
		r = tp_bp_unhook_return(bps, tid, own.rsp, &st);
		goto resume;
	}
	bp = tp_bp_find(bps, pc - 1);
	if (!bp)
		return 0;
	if (bp->retsite) {
		r = site_return(bps, tid, &own, bp->addr, &st);
		if (r)
			goto resume_at;
	}
	if (!bp->entry) {
		/* A return site that no call of this thread returns to now. */
		st.kind = TP_BP_STOP_SITE;
		r = bps->amap ? tp_bp_reap(bps, tid, false, own.rsp) : 0;
		goto resume_at;
	}
	bp->hits++;
	st.kind = TP_BP_STOP_ENTRY;
	st.func = bp->addr;
	st.sp = own.rsp;
	r = 0;
	slot = bp->slot; /* a return site planted below may move the table */
	if (bp->ret)
		r = hook_return(bps, tid, &own, bp->addr, flags & TP_BP_HIT_ASYNC, bp->site_ret,
				&st.no_return, &slot);
	else if (bps->amap)
		r = tp_bp_reap(bps, tid, false, own.rsp); /* what returned comes first */
	s = tp_bp_shadow_of(bps, tid, false);
	st.depth = s ? s->n : 0;
	if (!r)
		r = tp_proc_set_pc(tid, slot);
	goto resume;
resume_at:
	/* A return caught at a site that is a function's entry too: the int3 runs again
	 * for the entry. */
	if (r >= 0) {
		bool again = false;

		bp = tp_bp_find(bps, pc - 1);
		if (st.kind == TP_BP_STOP_RETURN) {
			/* So does the outer call of a tail call, waiting at the same site. */
			s = tp_bp_shadow_of(bps, tid, false);
			again = bp->entry || (s && s->n && s->f[s->n - 1].sp == st.sp &&
					      s->f[s->n - 1].slot == SLOT_SITE &&
					      s->f[s->n - 1].ret == bp->addr);
		}
		r = tp_proc_set_pc(tid, again ? bp->addr : bp->slot);
	}
resume:
	if (out)
		*out = st;
	if (!r && !(flags & TP_BP_HIT_STAY))
		r = tp_proc_resume(bps->p, tid, TP_RESUME_CONT, 0);
	return r ? r : 1;
}

/* One of our breakpoints inside an injected function: run its slot, no hooks. */
static int call_trap(void *arg, pid_t tid, uint64_t pc, uint64_t *to)
{
	struct bp *bp = tp_bp_find(arg, pc - 1);

	(void)tid;
	if (!bp)
		return -EIO;
	*to = bp->slot;
	return 0;
}

int tp_bp_call(struct tp_bps *bps, pid_t tid, uint64_t fn, const uint64_t args[6], uint64_t *ret)
{
	if (!bps->tramp)
		return -ENOENT;
	return tp_proc_inject_call(bps->p, bps->pid, tid, fn, args, bps->tramp, call_trap, bps,
				   ret);
}

uint64_t tp_bp_trampoline(const struct tp_bps *bps)
{
	return bps->tramp;
}

bool tp_bp_real_return(struct tp_bps *bps, pid_t tid, uint64_t slot, uint64_t *ret)
{
	struct shadow *s = tp_bp_shadow_of(bps, tid, false);

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
	struct shadow *s = tp_bp_shadow_of(bps, tid, false);

	if (!s)
		return;
	/* The thread is gone, and with it every way back to its stubs. */
	for (unsigned i = 0; i < s->n; i++)
		if (s->f[i].slot >= 0 && !s->f[i].borrowed)
			tp_bp_slot_put(bps, (uint32_t)s->f[i].slot);
	free(s->f);
	*s = bps->sh[--bps->nsh];
}

int tp_bp_copy_shadow(struct tp_bps *bps, pid_t from, struct tp_bps *to, pid_t tid)
{
	struct shadow *src = tp_bp_shadow_of(bps, from, false), *dst;
	int r;

	if (!src || !src->n)
		return 0;
	dst = tp_bp_shadow_of(to, tid, true);
	if (!dst)
		return -ENOMEM;
	src = tp_bp_shadow_of(bps, from, false); /* @to may be @bps: its array moved */
	r = tp_bp_shadow_reserve(dst, src->n);
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
	struct shadow *s = tp_bp_shadow_of(bps, tid, false);
	int err = 0;

	for (unsigned i = s ? s->n : 0; i-- > 0;) {
		struct frame *f = &s->f[i];
		uint64_t v;
		int r;

		if (f->unhooked || tp_proc_read(bps->pid, f->sp, &v, sizeof(v)) != sizeof(v) ||
		    v != tp_bp_hook_of(bps, f))
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
	struct shadow *s = tp_bp_shadow_of(bps, tid, false);
	int err = 0;

	while (s && s->n && s->f[s->n - 1].sp <= sp)
		tp_bp_drop_top(bps, s);
	for (unsigned i = s ? s->n : 0; i-- > 0;) {
		struct frame *f = &s->f[i];
		uint64_t v;
		int r;

		if (!f->unhooked)
			continue;
		f->unhooked = false;
		if (tp_proc_read(bps->pid, f->sp, &v, sizeof(v)) != sizeof(v) || v != f->ret)
			continue;
		v = tp_bp_hook_of(bps, f);
		r = tp_proc_write(bps->pid, f->sp, &v, sizeof(v));
		if (r && !err)
			err = r;
	}
	return err;
}

unsigned tp_bp_depth(struct tp_bps *bps, pid_t tid)
{
	struct shadow *s = tp_bp_shadow_of(bps, tid, false);

	return s ? s->n : 0;
}
