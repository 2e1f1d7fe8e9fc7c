/* The ptrace engine of `tracepad count`: PTRACE_SINGLESTEP every instruction of the counted
 * threads, the tracer pinned to the CPU of its tracees.  Each step stop confirms that the
 * instruction the thread was resumed at has run, and only then is it counted; this keeps
 * signal deliveries (which run nothing before the handler) and exits exact.  The same
 * stepper counts the start-up of the trapflag engine until the agent takes over. */
#include <errno.h>
#include <elf.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>

#include "count/count-priv.h"
#include "count/ptrace-priv.h"
#include "bp/bp.h"
#include "base/log.h"
#include "elf/symbols.h"
#include "proc/guard.h"
#include "proc/proc.h"

static struct pthread *thread_get(struct engine *e, pid_t tid)
{
	uint64_t *v = tp_hash_get(&e->threads, (uint64_t)tid);
	struct pthread *t;

	if (v)
		return (struct pthread *)(uintptr_t)*v;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = tid;
	t->last_pc = NO_PC;
	t->next_pc = NO_PC;
	t->late_pc = NO_PC;
	if (tp_hash_put(&e->threads, (uint64_t)tid, (uintptr_t)t)) {
		free(t);
		return NULL;
	}
	return t;
}

static int exec_seen(void *arg, uint64_t tid, uint64_t *v)
{
	struct pthread *t = (struct pthread *)(uintptr_t)*v;

	(void)arg, (void)tid;
	t->exec_done = t->counting;
	return 0;
}

static int collect_thread(void *arg, uint64_t tid, uint64_t *v)
{
	struct pthread *t = (struct pthread *)(uintptr_t)*v;

	(void)tid;
	if (t->count)
		tp_count_add_thread(arg, t->tid, t->count);
	return 0;
}

static int free_thread(void *arg, uint64_t tid, uint64_t *v)
{
	(void)arg, (void)tid;
	free((void *)(uintptr_t)*v);
	return 0;
}

static int decode(struct engine *e, uint64_t pc, struct dc *out)
{
	size_t h = (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 40) & e->dc_mask;
	uint8_t buf[TP_ARCH_MAX_INSN_LEN];
	struct tp_insn in;
	ssize_t n;

	for (size_t i = 0; i < 16; i++, h = (h + 1) & e->dc_mask) {
		if (e->dc[h].pc == pc) {
			*out = e->dc[h];
			return 0;
		}
		if (!e->dc[h].pc)
			break;
	}
	n = tp_proc_read(e->pid, pc, buf, sizeof(buf));
	if (n <= 0 || tp_arch_decode(buf, (size_t)n, pc, &in))
		return -1;
	/* a breakpoint of ours hides the first byte */
	for (int i = 0; i < e->nbps; i++) {
		uint64_t a = e->bps[i].addr;

		if (e->bps[i].live && a >= pc && a < pc + (uint64_t)n) {
			buf[a - pc] = e->bps[i].orig;
			if (tp_arch_decode(buf, (size_t)n, pc, &in))
				return -1;
		}
	}
	out->pc = pc;
	out->mnem = in.mnemonic;
	out->kind = in.kind;
	out->len = in.len;
	out->flags = in.flags;
	if (!e->dc[h].pc || e->dc[h].pc == pc)
		e->dc[h] = *out;
	return 0;
}

static bool in_agent(struct engine *e, uint64_t pc)
{
	return pc >= e->agent_lo && pc < e->agent_hi;
}

/* The instruction t was resumed at has run: count it. */
static void count_last(struct engine *e, struct pthread *t)
{
	struct tp_count_result *r = e->c->r;

	if (t->last_pc == NO_PC)
		return;
	t->count++;
	if (!(++r->total & 0xffff))
		tp_count_progress(e->c, r->total);
	if (t->last_mnem < TP_AGENT_MNEMONICS)
		r->mnemonic[t->last_mnem]++;
	if (e->c->o->by >= TP_COUNT_BY_FUNCTION || !e->synced)
		tp_count_addrs_add(&r->addrs, t->last_pc, 1);
	t->last_pc = NO_PC;
}

/* The instruction at @pc ran within the last step as well (see TP_INSN_F_LATE_STEP). */
static void count_also(struct engine *e, struct pthread *t, uint64_t pc)
{
	struct dc d;

	if (decode(e, pc, &d))
		d.mnem = 0;
	t->last_pc = pc;
	t->last_mnem = d.mnem;
	count_last(e, t);
}

/* Resumed with a signal at @pc: the instruction there runs within the step unless a handler
 * is entered (its entry stop says so) or the signal kills (the exit stop says so).  A syscall
 * too: an ignored signal (a child's SIGCHLD) lets it run, exit included. */
static void prime_after_signal(struct engine *e, struct pthread *t, uint64_t pc)
{
	struct dc d;

	t->last_pc = NO_PC;
	if (pc == e->entry_pc || pc == e->stop_pc || in_agent(e, pc) || tp_cpt_bp_at(e, pc) ||
	    decode(e, pc, &d))
		return;
	t->last_pc = pc;
	t->last_mnem = d.mnem;
	t->last_kind = d.kind;
	if (d.flags & TP_INSN_F_LATE_STEP)
		t->late_pc = pc + d.len;
}

static void stop_counting(struct pthread *t)
{
	t->counting = false;
	t->in_region = false;
}

/* t is stopped, about to run the instruction at @pc; decide how it goes on.  @regs may be
 * NULL when pc was predicted (the last instruction falls through): the registers are then
 * read only where the region test needs the stack pointer. */
static int advance_at(struct engine *e, struct pthread *t, uint64_t pc,
		      const struct user_regs_struct *regs)
{
	struct user_regs_struct r;
	struct tp_abp_ptrace *bp;
	struct dc d;

	t->next_pc = NO_PC;
	t->late_pc = NO_PC;
	if (!t->counting)
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
	if (pc == e->entry_pc) {
		/* the loader is done: the thread stays stopped for the agent's injection */
		t->last_pc = NO_PC;
		return 1;
	}
	if (in_agent(e, pc)) {
		/* the agent's code is not counted; tracepad_step_end() ends an API region */
		if (e->c->api && pc == e->api_end_pc) {
			stop_counting(t);
			return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
		}
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_STEP, 0);
	}
	if (t->in_region && !regs && pc == t->region_ret) {
		int err = tp_proc_get_regs(t->tid, &r);

		if (err)
			return err;
		regs = &r;
	}
	/* the stack can only rise above the region's frame through a branch (ret, longjmp's
	 * indirect jump), after which the registers are always read */
	if (t->in_region && regs &&
	    tp_region_returned(pc, regs->rsp, t->region_ret, t->region_sp)) {
		stop_counting(t);
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
	}
	if (pc == e->stop_pc) {
		stop_counting(t);
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
	}
	if (decode(e, pc, &d)) {
		d.mnem = 0;
		d.kind = TP_INSN_OTHER;
		d.len = 0;
	}
	t->last_pc = pc;
	t->last_mnem = d.mnem;
	t->last_kind = d.kind;
	bp = tp_cpt_bp_at(e, pc);
	if (bp) {
		/* step the original instruction with every other thread stopped */
		int err = tp_proc_stop_all(e->proc, t->tid);

		if (!err)
			err = tp_cpt_bp_write(e, bp, false);
		if (err)
			return err;
		t->over = bp;
		e->over_tid = t->tid;
	} else if (d.flags & TP_INSN_F_LATE_STEP) {
		t->late_pc = pc + d.len;
	} else if (d.kind == TP_INSN_OTHER && d.len && !(d.flags & TP_INSN_F_REP)) {
		t->next_pc = pc + d.len;
	}
	return tp_cpt_step(e, t, d.kind);
}

static int advance(struct engine *e, struct pthread *t, struct user_regs_struct *regs)
{
	return advance_at(e, t, regs->rip, regs);
}

static void region_begin(struct engine *e, struct pthread *t, struct user_regs_struct *regs)
{
	uint64_t ret;

	if (t->counting || t->region_done)
		return;
	if (tp_proc_read(e->pid, regs->rsp, &ret, 8) != 8)
		return;
	t->counting = t->in_region = t->region_done = true;
	t->region_sp = regs->rsp;
	t->region_ret = ret;
	t->last_pc = NO_PC;
}

/* Breakpoints of a region run; called once the program's objects are loaded (at the agent's
 * sync, or at the exec stop of a static program). */
static int setup_regions(struct engine *e)
{
	struct tp_count_ctx *c = e->c;
	uint64_t bias;
	int err;

	if (e->stepping_all)
		return 0;
	err = tp_elf_exe_bias(e->pid, &bias);
	if (err)
		return err;
	if (c->stop_vaddr)
		e->stop_pc = bias + c->stop_vaddr;
	if (c->api) {
		if (!c->ctl || !c->ctl->step_begin_pc)
			return -ENOENT;
		e->api_end_pc = c->ctl->step_end_pc;
		return tp_cpt_bp_insert(e, c->ctl->step_begin_pc, PBP_API_BEGIN);
	}
	if (c->main_dynamic) {
		uint64_t lsm;

		err = tp_symtab_load_pid(c->syms, e->pid);
		if (!err)
			err = tp_symtab_find_symbol(
			    c->syms, c->is_static ? "__libc_start_main" : "libc:__libc_start_main",
			    &lsm);
		if (err)
			return err;
		return tp_cpt_bp_insert(e, lsm, PBP_LSM);
	}
	if (c->start_vaddr) {
		e->start_pc = bias + c->start_vaddr;
		return tp_cpt_bp_insert(e, e->start_pc, PBP_START);
	}
	return 0;
}

struct agent_walk {
	struct engine *e;
	uint64_t removed;
};

static int uncount_agent(void *arg, uint64_t pc, uint64_t *n)
{
	struct agent_walk *w = arg;
	struct dc d;

	if (!*n || !in_agent(w->e, pc))
		return 0;
	w->removed += *n;
	if (!decode(w->e, pc, &d) && d.mnem < TP_AGENT_MNEMONICS)
		w->e->c->r->mnemonic[d.mnem] -= *n;
	*n = 0;
	return 0;
}

/* The agent's int3 in its constructor: objects are loaded, the agent's code is known. */
static int on_sync(struct engine *e, struct pthread *t)
{
	const struct tp_map *m;
	struct tp_count_result *r = e->c->r;
	struct agent_walk w = {e, 0};
	uint64_t before;

	e->synced = true;
	tp_symtab_load_pid(e->c->syms, e->pid);
	m = tp_symtab_find_map(e->c->syms, e->sync_pc);
	if (m) {
		e->agent_lo = m->start;
		e->agent_hi = m->end;
	}
	/* the agent's constructor ran stepped before its range was known: take it back out */
	tp_hash_foreach(&r->addrs.pcs, uncount_agent, &w);
	before = w.removed;
	t->count -= before;
	r->total -= before;
	if (e->until_sync)
		return 1;
	return setup_regions(e);
}

static int on_breakpoint(struct engine *e, struct pthread *t, struct tp_event *ev)
{
	struct user_regs_struct regs;
	struct tp_abp_ptrace *bp;
	int err = tp_proc_get_regs(t->tid, &regs);

	if (err)
		return err;
	if (e->c->ctl && !e->synced) {
		e->sync_pc = __atomic_load_n(&e->c->ctl->sync_pc, __ATOMIC_ACQUIRE);
		if (e->sync_pc && regs.rip - 1 == e->sync_pc) {
			count_last(e, t);
			err = on_sync(e, t);
			if (err)
				return err;
			/* the agent's own set-up runs free up to its second int3 */
			t->last_pc = NO_PC;
			return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
		}
	}
	if (e->synced && regs.rip - 1 == e->c->ctl->sync2_pc)
		return advance(e, t, &regs);
	bp = tp_cpt_bp_at(e, regs.rip - 1);
	if (!bp) {
		/* the program's own int3: it gets its SIGTRAP, as without tracepad */
		count_last(e, t);
		t->last_pc = NO_PC;
		t->next_pc = NO_PC;
		t->mask_check = true; /* its handler's mask, from its entry on */
		return tp_proc_resume(e->proc, t->tid,
				      t->counting ? TP_RESUME_STEP : TP_RESUME_CONT, SIGTRAP);
	}
	regs.rip = bp->addr;
	switch (bp->kind) {
	case PBP_LSM: {
		uint64_t main_pc = regs.rdi;

		tp_cpt_bp_write(e, bp, false);
		bp->live = false;
		err = tp_proc_set_regs(t->tid, &regs);
		if (!err)
			err = tp_cpt_bp_insert(e, main_pc, PBP_START);
		if (err)
			return err;
		e->start_pc = main_pc;
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
	}
	case PBP_API_BEGIN: {
		/* tracepad_step_begin() does nothing here: return from it at once */
		uint64_t ret;

		if (tp_proc_read(e->pid, regs.rsp, &ret, 8) != 8)
			return -EFAULT;
		regs.rip = ret;
		regs.rsp += 8;
		err = tp_proc_set_regs(t->tid, &regs);
		if (err)
			return err;
		if (!t->counting) {
			t->counting = true;
			t->last_pc = NO_PC;
		}
		return advance(e, t, &regs);
	}
	case PBP_START:
		err = tp_proc_set_regs(t->tid, &regs);
		if (err)
			return err;
		region_begin(e, t, &regs);
		if (!t->counting) {
			/* a thread past its region: run the original instruction, uncounted */
			t->counting = true;
			err = advance(e, t, &regs);
			t->counting = false;
			t->last_pc = NO_PC;
			return err;
		}
		return advance(e, t, &regs);
	}
	return 0;
}

static int on_step(struct engine *e, struct pthread *t, struct tp_event *ev)
{
	struct user_regs_struct regs;
	int err;

	if (t->at_exec) {
		/* a step from a stop inside a syscall is first reported as TRAP_BRKPT at the
		 * syscall's exit: execve's, before the new image ran anything */
		t->at_exec = false;
		if (ev->si.si_code == TRAP_BRKPT) {
			t->last_pc = NO_PC;
			err = tp_proc_get_regs(t->tid, &regs);
			return err ? err : advance(e, t, &regs);
		}
	}
	/* si_code SIGTRAP: the kernel stopped us at a signal handler's entry, nothing ran */
	if (ev->si.si_code == SIGTRAP)
		t->last_pc = NO_PC;
	else
		count_last(e, t);
	if (t->late_pc != NO_PC && ev->si.si_code != SIGTRAP) {
		/* a step over cpuid that stops past the next instruction ran that one too */
		err = tp_proc_get_regs(t->tid, &regs);
		if (err)
			return err;
		if (regs.rip != t->late_pc)
			count_also(e, t, t->late_pc);
	}
	t->late_pc = NO_PC;
	if (t->over) {
		err = tp_cpt_bp_write(e, t->over, true);
		t->over = NULL;
		e->over_tid = 0;
		if (!err)
			err = tp_proc_resume_all(e->proc);
		if (err)
			return err;
		if (!t->counting) {
			/* a thread that only stepped over the breakpoint */
			return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
		}
	}
	if (t->exec_done) {
		/* counting covers the image that was launched; execve was its last */
		stop_counting(t);
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
	}
	if (t->next_pc != NO_PC && ev->si.si_code != SIGTRAP)
		return advance_at(e, t, t->next_pc, NULL);
	err = tp_proc_get_regs(t->tid, &regs);
	if (err)
		return err;
	return advance(e, t, &regs);
}

/* A stop that src/proc took for our step but that is a SIGTRAP of the program's own: one it
 * queued itself (rt_tgsigqueueinfo) with si_code TRAP_TRACE or TRAP_BRKPT, whose si_addr is
 * not where the thread stopped (the kernel reports a step at the pc it stopped at), or the
 * trap of an icebp it ran (TRAP_BRKPT just past a 1-byte trapping instruction, or at it).  The
 * registers are read only where the next pc was not predicted (where on_step reads them
 * anyway): a predicted step reports that pc. */
static bool step_is_theirs(struct pthread *t, const struct tp_event *ev)
{
	uint64_t addr = (uint64_t)(uintptr_t)ev->si.si_addr;
	struct user_regs_struct regs;

	if (t->over || t->at_exec || (ev->si.si_code != TRAP_TRACE && ev->si.si_code != TRAP_BRKPT))
		return false;
	if (t->next_pc != NO_PC && addr == t->next_pc)
		return false;
	if (tp_proc_get_regs(t->tid, &regs))
		return false;
	if (addr != regs.rip)
		return true;
	/* some virtual machines (KVM on AMD) report an icebp as a fault, at the icebp */
	return ev->si.si_code == TRAP_BRKPT && t->last_pc != NO_PC && t->last_kind == TP_INSN_INT &&
	       (regs.rip == t->last_pc + 1 || regs.rip == t->last_pc);
}

/* A syscall run by tp_cpt_step() to its exit: its entry stop, then its exit stop, where it has run.
 */
static int on_syscall_stop(struct engine *e, struct pthread *t)
{
	struct user_regs_struct regs;
	int err;

	if (t->in_syscall == 1) {
		t->in_syscall = 2;
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_SYSCALL, 0);
	}
	if (t->in_syscall != 2)
		return tp_proc_resume(e->proc, t->tid,
				      t->counting ? TP_RESUME_STEP : TP_RESUME_CONT, 0);
	t->in_syscall = 0;
	count_last(e, t);
	err = tp_proc_get_regs(t->tid, &regs);
	if (err)
		return err;
	return advance(e, t, &regs);
}

/* The event loop; returns 0 when every task is gone (or, until_sync, at the agent's sync, or
 * at the program's entry with entry_pc). */
static int run(struct engine *e)
{
	struct tp_count_result *r = e->c->r;
	struct tp_event ev;
	struct pthread *t, *n;
	int err = 0;

	for (;;) {
		/* Every event, not only a wait cut short: a stepped thread stops again at once,
		 * so the wait hardly ever sleeps long enough to see the signal come. */
		if (e->c->stop && *e->c->stop)
			return -EINTR;
		if (!e->over_tid && e->ndeferred) {
			ev = e->deferred[0];
			memmove(e->deferred, e->deferred + 1, --e->ndeferred * sizeof(ev));
			err = 0;
		} else {
			err = tp_proc_wait(e->proc, &ev);
		}
		if (!err && e->over_tid && ev.tid != e->over_tid) {
			/* one step-over at a time: the breakpoint byte is out meanwhile */
			if (e->ndeferred == e->cap_deferred) {
				size_t ncap = e->cap_deferred ? e->cap_deferred * 2 : 16;
				struct tp_event *d = realloc(e->deferred, ncap * sizeof(*d));

				if (!d)
					return -ENOMEM;
				e->deferred = d;
				e->cap_deferred = ncap;
			}
			e->deferred[e->ndeferred++] = ev;
			continue;
		}
		if (err == -ECHILD)
			return 0;
		if (err == -EINTR)
			continue;
		if (err)
			return err;
		t = thread_get(e, ev.tid);
		if (!t)
			return -ENOMEM;
		tp_cpt_mask_back(t);
		switch (ev.kind) {
		case TP_EV_SYSCALL:
			err = on_syscall_stop(e, t);
			break;
		case TP_EV_BREAKPOINT:
			err = on_breakpoint(e, t, &ev);
			break;
		case TP_EV_STEP:
			if (!t->counting && !t->over) {
				err = tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
				break;
			}
			if (!t->counting || !step_is_theirs(t, &ev)) {
				err = on_step(e, t, &ev);
				break;
			}
			/* the program's: delivered as any signal (it may have come before the
			 * instruction ran, or after) */
			ev.sig = SIGTRAP;
			/* fall through */
		case TP_EV_SIGNAL:
			if (ev.sig == SIGTRAP && ev.si.si_code == SIGTRAP && t->counting) {
				err = on_step(e, t, &ev);
				break;
			}
			if (t->counting) {
				/* A signal stop usually comes before the instruction runs; but the
				 * step report of a syscall merges into a pending SIGTRAP, so a
				 * thread that moved did run it. */
				struct user_regs_struct regs;

				if (!tp_proc_get_regs(t->tid, &regs)) {
					if (t->last_pc != NO_PC && regs.rip != t->last_pc)
						count_last(e, t);
					/* an ignored signal (a fork's SIGCHLD) lets the instruction
					 * at pc run within the step; a handler's entry stop says
					 * when nothing ran (on_step) */
					prime_after_signal(e, t, regs.rip);
				}
			} else {
				t->last_pc = NO_PC;
			}
			t->next_pc = NO_PC;
			t->in_syscall = 0;
			if (ev.sig)
				t->mask_check = true; /* a handler's mask, from its entry on */
			err = tp_proc_resume(e->proc, t->tid,
					     t->counting ? TP_RESUME_STEP : TP_RESUME_CONT, ev.sig);
			break;
		case TP_EV_GROUP_STOP:
			err = tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
			break;
		case TP_EV_CLONE:
			n = thread_get(e, ev.new_tid); /* records stay put as the table grows */
			if (!n)
				return -ENOMEM;
			n->counting = t->counting;
			if (n->counting) {
				struct user_regs_struct regs;

				err = tp_proc_get_regs(n->tid, &regs);
				if (!err)
					err = advance(e, n, &regs);
			} else {
				err = tp_proc_resume(e->proc, n->tid, TP_RESUME_CONT, 0);
			}
			if (!err)
				err = tp_proc_resume(e->proc, t->tid,
						     t->counting ? TP_RESUME_STEP : TP_RESUME_CONT,
						     0);
			break;
		case TP_EV_FORK:
			r->forked = true;
			err = tp_proc_resume(e->proc, t->tid,
					     t->counting ? TP_RESUME_STEP : TP_RESUME_CONT, 0);
			break;
		case TP_EV_EXEC:
			t->in_syscall = 0;
			t->mask_check = true;
			/* the execve instruction ran (its step's trap never comes).  A thread
			 * not the leader that exec'd goes on as the leader, in its record. */
			if (ev.old_tid && ev.old_tid != ev.tid) {
				struct pthread *o = thread_get(e, ev.old_tid);

				if (!o)
					return -ENOMEM;
				if (o->counting)
					count_last(e, o);
				t->counting = o->counting;
				t->last_pc = NO_PC;
			} else if (t->counting) {
				count_last(e, t);
			}
			if (tp_count_follows_exec(e->c) && t->counting) {
				/* the count goes on in the new image, whose first step is first
				 * reported at execve's exit, as at the launch */
				r->exec_followed = true;
				t->at_exec = true;
			} else {
				r->exec_seen = true;
				tp_hash_foreach(&e->threads, exec_seen, NULL);
			}
			for (int i = 0; i < e->nbps; i++)
				e->bps[i].live = false; /* the new image has none */
			err = tp_proc_resume(e->proc, t->tid,
					     t->counting ? TP_RESUME_STEP : TP_RESUME_CONT, 0);
			break;
		case TP_EV_EXIT:
			/* the last chance to see the program's mappings, for the histogram */
			if (t->tid == e->pid && e->c->o->by >= TP_COUNT_BY_FUNCTION)
				tp_symtab_load_pid(e->c->syms, e->pid);
			/* an exiting thread ran its exit syscall; one killed did not run on */
			if (t->last_pc != NO_PC && t->last_kind == TP_INSN_SYSCALL &&
			    !WIFSIGNALED(ev.status))
				count_last(e, t);
			t->last_pc = NO_PC;
			err = tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
			break;
		case TP_EV_EXITED:
			if (ev.leader) {
				r->wait_status = ev.status;
				r->exited = true;
			}
			break;
		default:
			err = tp_proc_resume(e->proc, t->tid, TP_RESUME_CONT, 0);
			break;
		}
		if (err == 1)
			return 0; /* at the agent's sync or the entry: the trapflag engine takes
				     over */
		if (err && err != -ESRCH)
			return err;
	}
}

static void collect(struct engine *e)
{
	tp_hash_foreach(&e->threads, collect_thread, e->c->r);
}

static int engine_init(struct engine *e, struct tp_count_ctx *c)
{
	memset(e, 0, sizeof(*e));
	e->c = c;
	e->dc_mask = (1u << 16) - 1;
	e->dc = calloc(e->dc_mask + 1, sizeof(*e->dc));
	e->start_pc = e->stop_pc = e->api_end_pc = e->entry_pc = NO_PC;
	return e->dc ? 0 : -ENOMEM;
}

static void engine_fini(struct engine *e)
{
	tp_proc_guard_clear();
	free(e->deferred);
	tp_hash_foreach(&e->threads, free_thread, NULL);
	tp_hash_release(&e->threads);
	free(e->dc);
}

static int pin_cpu(void)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	if (cpu < 0)
		return -1;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -1 : cpu;
}

/* Launch under ptrace (count-priv.h says how). */
int tp_count_launch_ptrace(struct tp_count_ctx *c, bool until_sync, bool step_from_exec,
			   struct tp_proc **at_entry)
{
	char fdenv[64], trenv[64], preload[4096];
	char *env[4] = {fdenv, preload, NULL, NULL};
	const char *old = getenv("LD_PRELOAD");
	int keep[2] = {c->ctl_fd, c->cons ? tp_trace_consumer_fd(c->cons) : -1};
	struct tp_launch l = {0};
	struct user_regs_struct regs;
	struct pthread *t;
	struct engine e;
	cpu_set_t orig;
	double t0;
	int err;

	err = engine_init(&e, c);
	if (err)
		return err;
	e.until_sync = until_sync;
	e.stepping_all = step_from_exec;
	sched_getaffinity(0, sizeof(orig), &orig);
	snprintf(fdenv, sizeof(fdenv), "%s=%d", TP_AGENT_ENV_FD, c->ctl_fd);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s%s%s", c->o->agent, old ? ":" : "",
		 old ? old : "");
	l.argv = c->o->argv;
	/* Whole-program counts run the program as it is: its environment, and no agent mapped
	 * by the loader (whose work for it would be counted as the program's). */
	l.env_add = c->is_static || at_entry || (step_from_exec && !until_sync) ? NULL : env;
	if (c->cons) {
		snprintf(trenv, sizeof(trenv), "%s=%d", TP_AGENT_ENV_TRACE_FD, keep[1]);
		env[2] = trenv;
	}
	l.keep_fds = keep;
	l.nkeep_fds = c->cons ? 2 : c->ctl_fd >= 0 ? 1 : 0;
	/* a stepping tracer shares its tracee's CPU: each step would wake the other one */
	l.cpu = step_from_exec || !until_sync ? pin_cpu() : -1;
	l.opts = TP_PROC_TRACE_EXEC | TP_PROC_TRACE_EXIT;
	t0 = tp_count_now();
	err = tp_proc_launch(&l, &e.proc);
	if (err)
		goto out;
	e.pid = c->pid = tp_proc_pid(e.proc);
	tp_cpt_catch_fatal(&e);
	if (until_sync && !step_from_exec) {
		/* the agent counts alone: let the program go at its first instruction */
		err = tp_proc_detach(e.proc);
		e.proc = NULL;
		goto out;
	}
	t = thread_get(&e, e.pid);
	t->counting = step_from_exec;
	if (!l.env_add)
		e.synced = true; /* no agent: nothing of it to take out of the counts */
	if (at_entry && !tp_proc_auxv(e.pid, AT_ENTRY, &e.entry_pc))
		e.until_sync = true;
	else if (at_entry)
		err = -ENOEXEC;
	if (step_from_exec)
		snprintf(c->r->start_note, sizeof(c->r->start_note),
			 "counted from the first instruction after execve (the dynamic loader's "
			 "entry)");
	if (!err)
		err = tp_proc_get_regs(e.pid, &regs);
	if (!err && c->is_static && !step_from_exec)
		err = setup_regions(&e);
	t->at_exec = t->counting;
	if (!err)
		err = advance(&e, t, &regs);
	if (!err)
		err = run(&e);
	else if (err == 1)
		err = 0; /* already at the entry */
	if (at_entry && !err && !c->r->exited) {
		/* at the entry, stopped: the agent is injected from here (trapflag.c) */
		c->r->have_startup = true;
		c->r->startup = c->r->total;
		c->r->control_pc = e.entry_pc;
		collect(&e);
		sched_setaffinity(e.pid, sizeof(orig), &orig);
		sched_setaffinity(0, sizeof(orig), &orig);
		*at_entry = e.proc;
		e.proc = NULL;
		goto out;
	}
	if (until_sync && !err && e.synced) {
		/* hand over: the start-up goes to the main thread */
		c->r->have_startup = true;
		c->r->startup = c->r->total;
		collect(&e);
		sched_setaffinity(e.pid, sizeof(orig), &orig);
		err = tp_proc_detach(e.proc);
		e.proc = NULL;
		sched_setaffinity(0, sizeof(orig), &orig);
		goto out;
	}
	c->r->seconds = tp_count_now() - t0;
	collect(&e);
	if (err == -EINTR) {
		tp_cpt_detach(&e);
		c->r->detached = true;
		err = 0;
	} else if (err) {
		tp_cpt_detach(&e);
	} else {
		tp_proc_free(e.proc);
		e.proc = NULL;
	}
out:
	engine_fini(&e);
	return err;
}

int tp_count_run_ptrace(struct tp_count_ctx *c)
{
	/* the passive agent stops once in its constructor: objects are loaded by then, and
	 * its own code range is known */
	if (c->ctl && !c->is_static)
		c->ctl->flags |= TP_CTL_SYNC | TP_CTL_SYNC2;
	return tp_count_launch_ptrace(c, false, c->whole, NULL);
}

/* -p PID: count a running process until it exits or tracepad is interrupted. */
int tp_count_attach_ptrace(struct tp_count_ctx *c)
{
	struct engine e;
	pid_t tids[4096];
	int n, err;
	double t0;

	err = engine_init(&e, c);
	if (err)
		return err;
	e.stepping_all = c->whole;
	pin_cpu();
	err = tp_proc_attach(c->o->pid, TP_PROC_TRACE_EXEC | TP_PROC_TRACE_EXIT, &e.proc);
	if (err)
		goto out;
	e.pid = tp_proc_pid(e.proc);
	tp_cpt_catch_fatal(&e);
	snprintf(c->r->start_note, sizeof(c->r->start_note),
		 "counted from the moment tracepad attached");
	err = tp_symtab_load_pid(c->syms, e.pid);
	if (!err && c->stop && *c->stop)
		goto detach; /* interrupted while reading the symbols: nothing counted */
	if (!err && !c->whole && c->o->start)
		err = tp_symtab_find_symbol(c->syms, c->o->start, &e.start_pc);
	if (!err && !c->whole && e.start_pc != NO_PC)
		err = tp_cpt_bp_insert(&e, e.start_pc, PBP_START);
	if (!err && c->o->stop)
		err = tp_symtab_find_symbol(c->syms, c->o->stop, &e.stop_pc);
	if (err)
		goto detach;
	n = tp_proc_tasks(e.proc, tids, 4096);
	t0 = tp_count_now();
	for (int i = 0; i < n && i < 4096 && !err; i++) {
		struct pthread *t = thread_get(&e, tids[i]);
		struct user_regs_struct regs;

		t->counting = c->whole;
		if (tp_proc_queued(e.proc, t->tid))
			continue; /* its stop is handled by run(), its signal delivered there */
		err = tp_proc_get_regs(t->tid, &regs);
		if (!err)
			err = advance(&e, t, &regs);
	}
	if (!err)
		err = run(&e);
	c->r->seconds = tp_count_now() - t0;
	collect(&e);
	if (!err) {
		tp_proc_free(e.proc);
		e.proc = NULL;
		goto out;
	}
	if (err == -EINTR)
		err = 0;
detach:
	tp_cpt_detach(&e);
	c->r->detached = true;
out:
	engine_fini(&e);
	return err;
}
