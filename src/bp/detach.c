/* Taking every breakpoint out: tasks moved out of slots, pending int3 stops settled,
 * bytes and return addresses given back, areas unmapped; and signal stops in a slot. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/procfs.h"
#include "bp/bp-priv.h"
#include "proc/guard.h"
#include "proc/inject.h"

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
			r = tp_bp_unhook_return(b, ev->tid, regs.rsp, NULL);
		return r ? r : 1;
	}
	if (tp_bp_find(b, pc - 1)) {
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
	pid_t tids[TASKS_MAX];
	int r, n, err = 0;

	for (;;) {
		r = tp_proc_inject_wait(b->p, &ev);
		if (r == -EDEADLK || r == -ECHILD)
			break;
		if (r)
			return r;
		r = settle(b, &ev);
		if (r < 0 && !err)
			err = r;
		if (r == 0 && (r = tp_proc_inject_defer(b->p, &ev)))
			return r;
	}
	n = tp_proc_tasks_of(b->p, b->pid, tids, TASKS_MAX);
	for (int i = 0; i < n && i < TASKS_MAX; i++) {
		if (!tp_proc_sig_pending(tids[i], SIGTRAP))
			continue;
		r = tp_proc_resume(b->p, tids[i], TP_RESUME_CONT, 0);
		while (!r) {
			r = tp_proc_inject_wait(b->p, &ev);
			if (r)
				break;
			if (ev.tid == tids[i] && settle(b, &ev) != 0)
				break;
			r = tp_proc_inject_defer(b->p, &ev);
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
	int r, steps = 0;
	uint64_t held = 0;

	for (;;) {
		r = tp_proc_get_pc(tid, &pc);
		if (!r && tp_bp_in_entry_stub(bps, pc)) {
			r = tp_bp_leave_entry_stub(bps, tid, pc);
			if (!r)
				r = tp_proc_get_pc(tid, &pc);
			steps++;
		}
		if (r || !tp_bp_in_areas(bps, pc) || tp_bp_in_stubs(bps, pc))
			break;
		if (!steps && bps->tramp && pc == bps->tramp)
			return 2;
		if (steps == SIGNAL_STEPS_MAX) {
			r = -EIO;
			break;
		}
		/* The slot's instruction and its jmp back: the task then is where it would
		 * have been without the slot, and its handler's frame says so. */
		r = tp_proc_inject_step(bps->p, tid, &held);
		if (r)
			break;
		steps++;
	}
	tp_proc_held_resend(bps->pid, tid, &held);
	tp_proc_inject_flush(bps->p);
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
	int r;
	uint64_t held = 0;

	/* A slot's copy is one or two instructions, a return stub fourteen (and a tail call
	 * chains stubs). */
	for (int i = 0; i < LEAVE_STEPS_MAX; i++) {
		struct bp *bp;

		r = tp_proc_get_pc(tid, &pc);
		if (!r && tp_bp_in_entry_stub(b, pc)) {
			r = tp_bp_leave_entry_stub(b, tid, pc);
			if (!r)
				r = tp_proc_get_pc(tid, &pc);
		}
		if (r)
			return r;
		if (!tp_bp_in_areas(b, pc)) {
			/* A reported int3 stop never passed to tp_bp_hit().  Only certain when
			 * addr + 1 is inside the instruction; a 1-byte one (push %rbp) is left
			 * alone, since pc = addr + 1 is then also where its slot returns. */
			bp = tp_bp_find(b, pc - 1);
			if (bp && bp->len > 1)
				return tp_proc_set_pc(tid, bp->addr);
			break;
		}
		bp = tp_bp_in_slot(b, pc);
		if (bp && pc == bp->slot)
			return tp_proc_set_pc(tid, bp->addr);
		tp_dbg("bp: %d at 0x%llx in an SSOL area (slot of 0x%llx at 0x%llx), stepping out",
		       tid, (unsigned long long)pc, bp ? (unsigned long long)bp->addr : 0ull,
		       bp ? (unsigned long long)bp->slot : 0ull);
		r = tp_proc_inject_step(b->p, tid, &held);
		if (r)
			return r;
	}
	tp_proc_held_resend(b->pid, tid, &held);
	/* The stubs stay mapped: one still running finishes without tracepad. */
	return tp_bp_in_areas(b, pc) && !tp_bp_in_stubs(b, pc) ? -EIO : 0;
}

/* Stack words looked at a thread at detach, at most (its live part, above the stack
 * pointer), and a read's size. */
#define SCAN_STACK_MAX (8u << 20)
#define SCAN_CHUNK (64u << 10)

struct maps_vec {
	uint64_t (*m)[2];
	unsigned n, cap;
};

static int maps_add(void *arg, const struct tp_maps_ent *e)
{
	struct maps_vec *v = arg;

	if (v->n == v->cap) {
		unsigned ncap = v->cap ? 2 * v->cap : 256;
		void *m = realloc(v->m, ncap * sizeof(*v->m));

		if (!m)
			return -ENOMEM;
		v->m = m;
		v->cap = ncap;
	}
	v->m[v->n][0] = e->start;
	v->m[v->n++][1] = e->end;
	return 0;
}

/* Does a live stack word of a thread point into the stubs (*@stubs) or an SSOL area (*@ssol)?
 * A signal handler's frame may hold one that no shadow frame knows (a signal that came
 * between a stub's "done" and its ret); so may a stale local, which only keeps the area
 * mapped for a later attach.  -errno when the stacks could not be read. */
static int stacks_point_in(struct tp_bps *b, const pid_t *tids, int n, bool *stubs, bool *ssol)
{
	struct maps_vec v = {0};
	uint64_t *buf;
	int r = tp_maps_foreach(b->pid, maps_add, &v);

	buf = r ? NULL : malloc(SCAN_CHUNK);
	if (!buf) {
		free(v.m);
		return r ? r : -ENOMEM;
	}
	for (int i = 0; i < n && i < TASKS_MAX; i++) {
		struct user_regs_struct regs;
		uint64_t end = 0, at;

		if (tp_proc_get_regs(tids[i], &regs))
			continue;
		for (unsigned k = 0; k < v.n; k++)
			if (regs.rsp >= v.m[k][0] && regs.rsp < v.m[k][1])
				end = v.m[k][1];
		if (end - regs.rsp > SCAN_STACK_MAX)
			end = regs.rsp + SCAN_STACK_MAX;
		for (at = regs.rsp & ~7ull; at < end; at += SCAN_CHUNK) {
			size_t len = end - at < SCAN_CHUNK ? end - at : SCAN_CHUNK;
			ssize_t got = tp_proc_read(b->pid, at, buf, len);

			for (ssize_t w = 0; w < got / 8; w++) {
				*stubs |= tp_bp_in_stubs(b, buf[w]);
				*ssol |= !tp_bp_in_stubs(b, buf[w]) && tp_bp_in_areas(b, buf[w]);
			}
			if (got < (ssize_t)len)
				break;
		}
	}
	free(buf);
	free(v.m);
	return 0;
}

/* Put return address @ret back at @sp if @hook is still there (else the frame is gone):
 * 1 when it was, 0 when not, -errno.  *@word (may be NULL): what was there (0: unreadable). */
static int give_back(struct tp_bps *b, uint64_t sp, uint64_t hook, uint64_t ret, uint64_t *word)
{
	uint64_t v;
	int r;

	if (tp_proc_read(b->pid, sp, &v, sizeof(v)) != sizeof(v))
		v = 0;
	if (word)
		*word = v;
	if (v != hook || !v)
		return 0;
	r = tp_proc_write(b->pid, sp, &ret, sizeof(ret));
	return r ? r : 1;
}

int tp_bp_remove_all(struct tp_bps *bps)
{
	pid_t tids[TASKS_MAX];
	uint8_t back[TP_ARCH_MAX_INSN_LEN], *maybe;
	bool busy = false;
	int r, n, err = 0;

	/* Best effort from here on: every byte that can be restored is, whatever failed. */
	err = tp_proc_stop_all(bps->p, 0);
	r = drain(bps);
	if (r && !err)
		err = r;
	n = tp_proc_tasks_of(bps->p, bps->pid, tids, TASKS_MAX);
	for (int i = 0; i < n && i < TASKS_MAX; i++) {
		uint64_t pc;

		r = leave_slot(bps, tids[i]);
		if (r && r != -ESRCH)
			bps->keep_areas = true;
		if (r && r != -ESRCH && !err)
			err = r;
		if (!tp_proc_get_pc(tids[i], &pc) && tp_bp_in_stubs(bps, pc))
			busy = true;
	}
	/* Every thread is out of the stubs: the returns they recorded are reported. */
	for (unsigned i = 0; bps->ret_fn && bps->amap && i < bps->nsh; i++)
		tp_bp_reap_frames(bps, bps->sh[i].tid, &bps->sh[i], UINT64_MAX, false, false, 0,
				  NULL);
	for (unsigned i = 0; i < bps->npool; i++) {
		struct bp *bp = &bps->pool[i];

		if (!bp->addr)
			continue;
		r = tp_proc_poke_int3(bps->pid, bp->addr, false, bp->orig[0]);
		if (!r && (tp_proc_read(bps->pid, bp->addr, back, bp->len) != bp->len ||
			   memcmp(back, bp->orig, bp->len)))
			r = -EIO;
		if (r && !err)
			err = r;
		bp->addr = 0;
	}
	bps->npool = 0;
	tp_hash_release(&bps->index);
	/* Return addresses the trampoline and the stubs took are given back on the stacks,
	 * also those of frames dropped as unwound that could still return (a stack switch). */
	maybe = bps->amap ? calloc(ASYNC_SLOTS, 1) : NULL;
	for (unsigned i = 0; i < bps->nsh; i++) {
		struct shadow *s = &bps->sh[i];

		for (unsigned k = 0; k < s->n; k++) {
			struct frame *f = &s->f[k];

			r = give_back(bps, f->sp, tp_bp_hook_of(bps, f), f->ret, NULL);
			if (r < 0 && !err)
				err = r;
			/* Not given back: its stub may still run (a signal frame holds it),
			 * unless an unwinder's walk has the real address in place. */
			if (r != 1 && maybe && f->slot >= 0 && !f->borrowed && !f->unhooked)
				maybe[f->slot] = 1;
		}
		s->n = 0;
	}
	for (unsigned i = 0; i < bps->naquar; i++) {
		struct quarantined *q = &bps->aquar[i];
		uint64_t word;

		/* The quarantine's rule: neither its stub nor its real return address on the
		 * stack any more, the frame is gone. */
		r = give_back(bps, q->sp, tp_bp_stub_at(bps, q->slot), q->ret, &word);
		if (r != 1 && maybe && word == q->ret)
			maybe[q->slot] = 1;
	}
	bps->naquar = 0;
	if ((bps->amap || bps->nareas) && n > 0) {
		bool ssol = false;

		if (stacks_point_in(bps, tids, n, &busy, &ssol))
			busy = ssol = true;
		if (ssol)
			bps->keep_areas = true;
	}
	bps->tramp = 0;
	/* Nothing runs in the areas any more: give the address space back (unless a thread
	 * could not be moved out of a slot: then they stay, marked for a later attach). */
	r = tp_bp_areas_leave(bps, n > 0 ? tids[0] : 0);
	if (r && !err)
		err = r;
	/* The stubs' area goes too when no stub can run any more; else it stays, for a return
	 * address that still points at a stub (in a signal frame, on a stack switched away)
	 * to return through it to the right place (each record keeps its real return
	 * address), and a later attach reuses it. */
	if (bps->amap && maybe) {
		r = tp_bp_stubs_leave(bps, n > 0 ? tids[0] : 0, maybe, busy);
		if (r)
			tp_dbg("bp: %d: return stubs left mapped: %s", bps->pid, strerror(-r));
	}
	free(maybe);
	bps->amap = 0;
	tp_proc_inject_flush(bps->p);
	return err;
}

/* After a crash of tracepad (src/proc's guard): task @tid, stopped, is put where it would be
 * without our int3s and slots. */
static void crash_settle(struct tp_bps *b, pid_t tid)
{
	struct user_regs_struct regs;
	struct bp *bp;
	int st;

	for (int i = 0; i < LEAVE_STEPS_MAX; i++) {
		if (tp_proc_get_regs(tid, &regs))
			return;
		if (b->tramp && regs.rip - 1 == b->tramp) {
			/* Returned through the trampoline: on to the real return address. */
			struct shadow *s = tp_bp_shadow_of(b, tid, false);

			for (unsigned k = s ? s->n : 0; k-- > 0;) {
				if (s->f[k].sp == regs.rsp - WORD) {
					tp_proc_set_pc(tid, s->f[k].ret);
					break;
				}
			}
			return;
		}
		/* An int3 stop not handled yet; past a 1-byte instruction, addr + 1 is also
		 * where its slot returns: only a stop known to be a trap is rewound. */
		bp = tp_bp_find(b, regs.rip - 1);
		if (bp && (bp->len > 1 || (!i && tp_proc_guard_trapped(tid)))) {
			tp_proc_set_pc(tid, bp->addr);
			return;
		}
		if (!tp_bp_in_areas(b, regs.rip) || tp_bp_in_stubs(b, regs.rip))
			return;
		bp = tp_bp_in_slot(b, regs.rip);
		if (bp && regs.rip == bp->slot) {
			tp_proc_set_pc(tid, bp->addr);
			return;
		}
		/* Inside a slot's copy: step out of it (the areas stay mapped anyway). */
		if (ptrace(PTRACE_SINGLESTEP, tid, 0, 0))
			return;
		while (waitpid(tid, &st, __WALL) < 0 && errno == EINTR)
			;
		if (!WIFSTOPPED(st))
			return;
	}
}

void tp_bp_crash_restore(struct tp_bps *bps)
{
	static const uint32_t one = 1;
	pid_t tids[TASKS_MAX];
	int n;

	if (!bps)
		return;
	n = tp_proc_tasks_of(bps->p, bps->pid, tids, TASKS_MAX);
	for (int i = 0; i < n && i < TASKS_MAX; i++)
		crash_settle(bps, tids[i]);
	for (unsigned i = 0; i < bps->npool; i++) {
		struct bp *bp = &bps->pool[i];

		if (bp->addr)
			tp_proc_poke_int3(bps->pid, bp->addr, false, bp->orig[0]);
	}
	/* A stub no return address points at any more is marked done: a later attach that
	 * reuses the stubs' area knows it will not run. */
	for (unsigned i = 0; i < bps->nsh; i++) {
		struct shadow *s = &bps->sh[i];

		for (unsigned k = 0; k < s->n; k++) {
			struct frame *f = &s->f[k];

			if (give_back(bps, f->sp, tp_bp_hook_of(bps, f), f->ret, NULL) == 1 &&
			    f->slot >= 0 && !f->borrowed)
				tp_proc_write(bps->pid, tp_bp_rec_at(bps, f->slot) + TP_RSTUB_DONE,
					      &one, 4);
		}
	}
	for (unsigned i = 0; i < bps->naquar; i++)
		if (give_back(bps, bps->aquar[i].sp, tp_bp_stub_at(bps, bps->aquar[i].slot),
			      bps->aquar[i].ret, NULL) == 1)
			tp_proc_write(bps->pid,
				      tp_bp_rec_at(bps, bps->aquar[i].slot) + TP_RSTUB_DONE, &one,
				      4);
}
