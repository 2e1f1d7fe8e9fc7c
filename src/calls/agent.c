/* `tracepad calls --engine agent`: the calls recorded in the program by the agent's call
 * hooks (src/agent/hooks.c).  tracepad launches the program and runs it to its entry point
 * (or attaches, -p), selects the functions (agent-select.c), hands them to the agent in a
 * memfd block (hooks-abi.h), has the agent place the pads with every thread stopped, lets
 * go of the program and turns the events it drains from the per-thread rings into the
 * ptrace engine's lines and summary; at -p's end it takes the pads out again. */
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/hooks-abi.h"
#include "base/log.h"
#include "calls/agent-priv.h"
#include "calls/unwind.h"
#include "plugins/plugins.h"
#include "proc/guard.h"
#include "proc/inject.h"

/* Options the agent engine does not have yet: the first one given, or NULL. */
static const char *unsupported(const struct tp_calls_opts *o)
{
	/* plugins stay attached (agent-watch.c), -f follows the family (agent-follow.c): not
	 * both at once yet */
	return o->nplugins && o->follow	    ? "--plugin with -f"
	       : o->nplugins && o->syscalls ? "--plugin with -S"
					    : NULL;
}

/* ---- start ---- */

/* -p's start (symbols, the selection, the agent's) takes a while: a signal to tracepad ends it
 * between its steps, before anything is changed in the program or once it is whole again. */
static bool interrupted(const struct session *s)
{
	return s->o->pid && s->o->stop && *s->o->stop;
}

static int load_agent(struct session *s, struct agent *a, pid_t *tid)
{
	struct tp_proc_agent ag = {.agent = s->o->agent,
				   .entry = "tracepad_hooks_attach",
				   .fd = a->fd,
				   .error = a->ctl->error,
				   .error_len = sizeof(a->ctl->error)};
	struct tp_proc_dl dl;
	char why[512];
	int r = interrupted(s) ? -EINTR : tp_calls_agent_dl(a, &dl);

	if (!r && interrupted(s))
		r = -EINTR;
	if (r)
		return r;
	r = tp_proc_load_agent(s->p, a->pid, &dl, &ag, why, sizeof(why));
	if (r) {
		tp_err("--engine agent: process %d: %s", a->pid, why);
		return r == -ENOENT ? -EINVAL : r;
	}
	*tid = ag.tid;
	snprintf(a->path, sizeof(a->path), "%s", ag.path);
	a->detach_pc = a->ctl->detach_pc;
	/* written by the agent: trusted only inside its own text */
	if (!tp_proc_agent_mapped(a->pid, ag.path, a->ctl->install_pc) ||
	    !tp_proc_agent_mapped(a->pid, ag.path, a->ctl->detach_pc))
		return -EIO;
	return 0;
}

/* A thread stopped on an inner boundary of a jmp site (or in a system call that restarts
 * there), or a signal handler's frame that would resume it there, goes on in the pad's copy
 * of the instruction. */
static int move_threads(struct session *s, struct agent *a)
{
	struct tp_proc_move *mv = calloc((size_t)a->n * TP_FTP_MAX_INSNS + 1, sizeof(*mv));
	size_t n = 0;
	int r;

	if (!mv)
		return -ENOMEM;
	for (uint32_t j = 0; j < a->n; j++) {
		const struct tp_hk_func *x = &a->hfs[j];

		for (uint32_t k = 1; !x->err && k < x->ninsn && k < TP_FTP_MAX_INSNS; k++)
			mv[n++] = (struct tp_proc_move){x->addr + x->ioff[k], x->icopy[k]};
	}
	r = tp_proc_move_tasks(s->p, a->pid, mv, n);
	free(mv);
	return r;
}

/* ---- the crash guard's part (proc/guard.h) ---- */

/* The agents whose hooks are in a program: a crash of tracepad puts their bytes back. */
#define GUARDED_MAX 64
static struct agent *volatile guarded[GUARDED_MAX];

static void guard_add(struct agent *a)
{
	for (int i = 0; i < GUARDED_MAX; i++)
		if (!guarded[i]) {
			guarded[i] = a;
			return;
		}
}

void tp_calls_agent_unguard(struct agent *a)
{
	for (int i = 0; i < GUARDED_MAX; i++)
		if (guarded[i] == a)
			guarded[i] = NULL;
}

/* Every task stopped, from the fault's handler (no malloc, no stdio): each hooked entry gets
 * the program's bytes back where it holds a pad's jmp or int3 (not where an exec put other
 * code), and a thread stopped at a hook's int3 goes back to the instruction, whose bytes
 * are the program's again.  The agent, finding tracepad gone, records nothing; the pads
 * and trampoline stay mapped for the threads on their way through them (a fork child of -f
 * keeps its inert pads). */
static void restore_on_crash(void *arg)
{
	struct session *s = arg;

	for (int i = 0; i < GUARDED_MAX; i++) {
		struct agent *a = guarded[i];

		if (!a || !a->orig)
			continue;
		for (uint32_t j = 0; j < a->n; j++) {
			uint8_t b = 0;

			if (tp_proc_read(a->pid, a->hfs[j].addr, &b, 1) == 1 &&
			    b != a->orig[j][0] && (b == 0xe9 || b == 0xcc))
				tp_proc_write(a->pid, a->hfs[j].addr, a->orig[j], ORIG_LEN);
		}
		for (int k = 0; k < s->nthreads; k++) {
			pid_t tid = s->threads[k]->tid;
			uint64_t pc;

			if (!tp_proc_guard_trapped(tid) || tp_proc_get_pc(tid, &pc))
				continue;
			for (uint32_t j = 0; j < a->n; j++)
				if (a->hfs[j].addr == pc - 1) {
					tp_proc_set_pc(tid, pc - 1);
					break;
				}
		}
	}
}

/* Launch the program to its entry point, or attach to -p's process: every thread stopped. */
static int take(struct session *s, struct agent *a)
{
	/* plugins see threads and processes end, stopped (tracepad stays attached; children
	 * only to be let go: agent-watch.c) */
	unsigned opts = s->o->nplugins
			    ? TP_PROC_TRACE_EXIT | TP_PROC_FOLLOW_FORK | TP_PROC_TRACE_EXEC
			: s->o->follow		      ? TP_PROC_FOLLOW_FORK | TP_PROC_TRACE_EXEC
			: s->events || s->o->syscalls ? TP_PROC_TRACE_EXEC
						      : 0;
	struct tp_launch l = {.argv = s->o->argv, .cpu = -1, .opts = opts};
	int r;

	if (s->o->pid) {
		char why[256];

		r = tp_proc_attach(s->o->pid, opts, &s->p);
		if (r == -EPERM && !tp_proc_perm_reason(s->o->pid, why, sizeof(why)))
			tp_err("cannot attach to %d: %s", s->o->pid, why);
		else if (r)
			tp_err("cannot attach to %d: %s", s->o->pid,
			       r == -ESRCH   ? "no such process"
			       : r == -EINTR ? "interrupted while waiting for its threads to stop"
					     : strerror(-r));
		a->pid = s->o->pid;
		return r;
	}
	r = tp_proc_launch(&l, &s->p);
	if (r) {
		tp_err("cannot run %s: %s", s->o->argv[0],
		       r == -ENOEXEC ? "not an executable format tracepad can run" : strerror(-r));
		return r;
	}
	s->launched = true;
	a->pid = tp_proc_pid(s->p);
	r = tp_calls_agent_to_entry(s, a->pid);
	return r && r != -ESRCH ? -EIO : r;
}

struct agent *tp_calls_agent_new(pid_t pid)
{
	struct agent *a = calloc(1, sizeof(*a));

	if (a) {
		a->fd = -1;
		a->pid = pid;
	}
	return a;
}

void tp_calls_agent_clear(struct agent *a)
{
	pid_t pid = a->pid;

	tp_calls_agent_unguard(a);
	if (a->ctl)
		munmap(a->ctl, a->size);
	if (a->fd >= 0)
		close(a->fd);
	free(a->func_of);
	free(a->orig);
	free(a->nobt);
	free(a->walks);
	tp_unwind_memo_free(a->memo);
	free(a->room);
	*a = (struct agent){.fd = -1, .pid = pid};
}

void tp_calls_agent_free(struct agent *a)
{
	if (!a)
		return;
	tp_calls_agent_clear(a);
	free(a);
}

int tp_calls_agent_hook(struct session *s, struct agent *a)
{
	struct image *im;
	uint64_t bad = 0;
	unsigned failed = 0;
	pid_t tid;
	int r;

	/* the loader is done: objects and functions as the ptrace engine selects them */
	a->im = im = tp_calls_image_new(s, a->pid, a->pid, false);
	if (!im || tp_calls_add_pid(s, a->pid))
		return -ENOMEM;
	/* a static program is hooked from its main: launched by tracepad (with -f, an exec'd
	 * one would have to be run there with other processes' events coming) or with -p */
	if (im->is_static && a->launched && (r = tp_calls_agent_to_main(s, a))) {
		if (r == -ENOENT)
			tp_err("--engine agent: process %d: a static program without main", a->pid);
		return r == -ENOENT ? -EINVAL : r;
	}
	if (im->is_static && !a->launched && !s->o->pid) {
		tp_err("--engine agent: process %d: a static program exec'd: not traced", a->pid);
		return -EINVAL;
	}
	r = tp_calls_agent_select(s, im, a, tp_proc_loader_task(s->p, a->pid));
	if (!r && im->libc &&
	    !tp_errno_tpoff(a->pid, im->libc->path, im->libc->bias, &a->ctl->errno_tpoff))
		a->ctl->errno_ok = 1;
	/* --bt: the objects known to the unwinder and the symbols while the process is there
	 * (a short one may be gone by the time its rings are drained) */
	if (!r && s->o->bt) {
		char buf[64];

		im->uw = tp_unwinder_new(a->pid);
		tp_calls_symbolize(s, a->pid, im->entry, false, buf, sizeof(buf));
	}
	a->orig = calloc(TP_HK_MAX_FUNCS, ORIG_LEN);
	/* the agent asks for the objects dlopen'ed later at the loader's r_brk */
	for (uint32_t j = 0; !r && j < a->n; j++)
		if (a->hfs[j].flags & TP_HK_F_RBRK)
			a->ctl->rdebug = im->rdebug;
	if (!r && !a->orig)
		r = -ENOMEM;
	if (!r && interrupted(s))
		r = -EINTR;
	if (!r) {
		a->ctl->follow = s->o->follow;
		tp_calls_agent_plan(s, a, 0);
		r = load_agent(s, a, &tid);
	}
	if (r)
		return r;
	r = tp_proc_stop_all(s->p, 0);
	/* read once the agent took over: the pads of a session whose tracepad was killed are out
	 * of the code by now (tracepad_hooks_attach) */
	for (uint32_t j = 0; !r && j < a->n; j++)
		if (tp_proc_read(a->pid, a->hfs[j].addr, a->orig[j], ORIG_LEN) != ORIG_LEN)
			r = -EIO;
	if (!r)
		r = tp_proc_inject_fcall(s->p, a->pid, tid, a->ctl->install_pc,
					 (const uint64_t[6]){0}, false, &bad);
	if (r) {
		tp_err("--engine agent: cannot place the hooks: %s", strerror(-r));
		return r == -ESRCH ? r : -EIO;
	}
	a->live = true;
	guard_add(a);
	for (uint32_t j = 0; j < a->n; j++) {
		const struct tp_hk_func *x = &a->hfs[j];

		if (x->err && x->flags & TP_HK_F_SHOWN && !failed++)
			tp_warn("%s:%s cannot be hooked: %s", a->func_of[j]->obj->base,
				a->func_of[j]->name, strerror(-x->err));
		else if (!x->err && x->kind != 1)
			tp_dbg("calls: %s through an int3 (reason %u)", a->func_of[j]->name,
			       x->why);
	}
	if (failed > 1)
		tp_warn("%u selected functions cannot be hooked", failed);
	return move_threads(s, a);
}

/* ---- events ---- */

struct thread *tp_calls_agent_thread(struct session *s, pid_t pid, pid_t tid)
{
	struct thread *t = tp_calls_thread_of(s, tid);

	return t ? t : tp_calls_thread_add(s, tid, pid, NULL, true);
}

/* The clock of the records' time stamps: the session's (clock.c), whose every conversion
 * reads CLOCK_MONOTONIC, taken as an anchor and a rate at most a millisecond old. */
static void clock_anchor(struct session *s, struct agent *a)
{
	uint64_t now = __builtin_ia32_rdtsc();

	if (a->clk_rate && now >= a->clk_tsc && (double)(now - a->clk_tsc) * a->clk_rate < 1e6)
		return;
	a->clk_tsc = now;
	a->clk_ns = tp_calls_tsc_ns(s, now);
	a->clk_rate = (double)tp_calls_ticks_ns(s, 1ull << 30) / (double)(1ull << 30);
}

static uint64_t ns_of(const struct agent *a, uint64_t tsc)
{
	return tsc >= a->clk_tsc ? a->clk_ns + (uint64_t)((double)(tsc - a->clk_tsc) * a->clk_rate)
				 : a->clk_ns - (uint64_t)((double)(a->clk_tsc - tsc) * a->clk_rate);
}

/* Whether plugins see the calls: s->plugins is the registry, there without any plugin too
 * (handing each call to none, with its caller read, was a twentieth of a call's cost). */
static bool plugged(const struct session *s)
{
	return s->o->nplugins > 0;
}

/* The call on top of @t is over: returned with @h's registers, or, @h NULL, left as @why
 * says. */
static void finish(struct session *s, struct agent *a, struct thread *t, const struct tp_hk_rec *h,
		   const char *why)
{
	struct rec *rc = &t->recs[--t->n];
	struct stat_ent *e;
	char text[600];
	bool failed = false;
	uint64_t d = 0;
	size_t len = 0;

	text[0] = 0;
	if (tp_calls_too_deep(s, t->n)) {
		if (h && plugged(s)) {
			rc->c.retval = h->regs[0];
			tp_calls_agent_current(a, 0, NULL, h);
			tp_plugins_ret(s->plugins, &rc->c);
			tp_calls_agent_current(NULL, 0, NULL, NULL);
		}
		return;
	}
	if (!h) {
		if (!s->o->summary && !s->o->min_ns && tp_calls_line_wanted(s, rc))
			tp_calls_line_call(s, t, rc, t->n, why);
		if (s->trace) {
			rc->c.return_ns = ns_of(a, s->ret_tsc);
			tp_calls_trace_return(s->trace, rc, why + 3);
		}
		return;
	}
	/* a frame left without its return (a fork child's inherited main, say) is no entry
	 * of the process's summary */
	e = tp_calls_stat_of(s, t->pid, rc->f);
	if (!e)
		return;
	{
		const struct tp_proto *p = tp_calls_agent_proto(s, rc->f);
		/* the agent's (zeroed once: clearing 216 bytes a call cost more than the rest) */
		struct user_regs_struct *regs = &a->regs;
		int err = (h->flags & TP_HK_R_ERRNO) ? (int)(int32_t)h->aux : -1;

		struct tp_calls_pieces ps = tp_calls_agent_pieces(h);
		struct user_fpregs_struct fp;

		regs->rax = h->regs[0];
		regs->rdx = h->regs[1];
		regs->rsp = h->sp + 8;

		d = (uint64_t)((double)(h->tsc > rc->entry_tsc ? h->tsc - rc->entry_tsc : 0) *
				   a->clk_rate +
			       0.5);
		if (s->need_args) {
			int n;

			tp_proto_set_mem(tp_calls_agent_piece_read, &ps);
			n = tp_proto_format_ret(p, -1, regs,
						tp_calls_agent_piece_fp(&ps, &fp) ? &fp : NULL, err,
						text, sizeof(text), &failed);
			tp_proto_set_mem(NULL, NULL);
			len = n > 0 ? (size_t)n : 0;
		} else
			failed = p && tp_proto_failed(p, regs);
	}
	e->returns++;
	e->errors += failed;
	e->total += d;
	e->min = d < e->min ? d : e->min;
	e->max = d > e->max ? d : e->max;
	if (s->trace) {
		rc->c.return_ns = rc->c.entry_ns + d;
		tp_calls_trace_return(s->trace, rc, text);
	}
	rc->c.retval = h->regs[0];
	rc->c.return_ns = rc->c.entry_ns + d;
	if (plugged(s)) {
		tp_calls_agent_current(a, 0, NULL, h);
		tp_plugins_ret(s->plugins, &rc->c);
		tp_calls_agent_current(NULL, 0, NULL, NULL);
	}
	if (s->o->summary || d < s->o->min_ns || !tp_calls_line_wanted(s, rc))
		return;
	tp_calls_line_return(s, t, rc, t->n, text, len, d);
}

/* --bt: the call's backtrace from its entry, unwound by libdw (unwind.h) over the registers
 * and the stack the agent copied (its plan's snap: BT_BYTES). */
static void backtrace_of(struct session *s, struct agent *a, struct thread *t,
			 const struct tp_hk_rec *h, struct rec *rc)
{
	int n = tp_calls_agent_unwind(s, a, t->tid, h, rc->pcs,
				      s->o->bt + 1 < 64 ? s->o->bt + 1 : 64, t->pid == a->pid);

	rc->npcs = n > 0 ? n : 0;
}

static void on_entry(struct session *s, struct agent *a, struct thread *t,
		     const struct tp_hk_rec *h)
{
	struct func *f = a->func_of[h->func];
	bool follow = h->flags & TP_HK_R_FOLLOWED;
	/* a tail call of a followed frame: it returns with that frame */
	bool tail = !follow && t->n && t->recs[t->n - 1].c.sp == h->sp;
	struct rec tmp, *rc = follow || tail ? tp_calls_rec_push(s, t) : &tmp;
	struct stat_ent *e;

	if (!rc)
		return;
	rc->f = f;
	rc->npcs = 0;
	rc->aux = tail ? REC_TAIL : 0;
	rc->entry_tsc = h->tsc;
	rc->stall0 = 0;
	rc->args[0] = 0;
	/* field by field: a compound literal's clearing (rep stos) cost a third of a call */
	rc->c.pid = t->pid;
	rc->c.tid = t->tid;
	rc->c.object = f->obj->base;
	rc->c.function = f->name;
	rc->c.func = f->addr;
	memcpy(rc->c.args, h->regs, sizeof(rc->c.args));
	rc->c.sp = h->sp;
	rc->c.caller = 0;
	rc->c.retval = 0;
	rc->c.depth = rc == &tmp ? t->n : t->n - 1;
	rc->c.entry_ns = ns_of(a, h->tsc);
	rc->c.return_ns = 0;
	rc->c.user = NULL;
	tp_calls_callers_enter(t, rc);
	if (plugged(s)) {
		struct tp_calls_pieces ps = tp_calls_agent_pieces(h);

		if (tp_calls_agent_piece_read(&ps, h->sp, &rc->c.caller, 8) != 8)
			rc->c.caller = 0;
		tp_calls_agent_current(a, t->tid, h, h);
		tp_plugins_call(s->plugins, &rc->c);
		tp_calls_agent_current(NULL, 0, NULL, NULL);
		/* only shrunk while the agent may read it: room is reckoned before the copy */
		if (a->nobt && a->nobt[h->func] < SNAP_PROBE && ++a->nobt[h->func] == SNAP_PROBE)
			a->hfs[h->func].plan.snap = 8;
	}
	if (tp_calls_too_deep(s, rc->c.depth) || !(e = tp_calls_stat_of(s, t->pid, f)))
		return;
	e->calls++;
	if (s->need_args) {
		struct user_regs_struct *regs = &a->regs;

		struct tp_calls_pieces ps = tp_calls_agent_pieces(h);
		struct user_fpregs_struct fp;

		regs->rdi = tp_hk_rec_reg(h, 0);
		regs->rsi = tp_hk_rec_reg(h, 1);
		regs->rdx = tp_hk_rec_reg(h, 2);
		regs->rcx = tp_hk_rec_reg(h, 3);
		regs->r8 = tp_hk_rec_reg(h, 4);
		regs->r9 = tp_hk_rec_reg(h, 5);
		regs->rsp = h->sp;
		/* the program's memory as the agent copied it at the call */
		tp_proto_set_mem(tp_calls_agent_piece_read, &ps);
		tp_proto_format_args(tp_calls_agent_proto(s, f), -1, regs,
				     tp_calls_agent_piece_fp(&ps, &fp) ? &fp : NULL, rc->args,
				     sizeof(rc->args));
		tp_proto_set_mem(NULL, NULL);
	}
	if (s->o->bt)
		backtrace_of(s, a, t, h, rc);
	if (s->trace)
		tp_calls_trace_call(s->trace,
				    rc); /* entry_ns as written: durations count from it */
	/* at the entry's time stamp: the line of a call not followed, or --entry's of one
	 * followed (its backtrace goes with the completed call, as the ptrace engine has it) */
	if (!s->o->summary && (rc == &tmp || s->o->entry) && tp_calls_line_wanted(s, rc)) {
		int npcs = rc->npcs;

		s->ret_tsc = h->tsc;
		rc->npcs = rc == &tmp ? npcs : 0;
		tp_calls_line_call(s, t, rc, rc->c.depth,
				   rc != &tmp  ? " ..."
				   : f->hooked ? " = <return not followed>"
					       : "");
		rc->npcs = npcs;
		s->ret_tsc = 0;
	}
}

static void one(struct session *s, struct agent *a, struct thread *t, const struct tp_hk_rec *h)
{
	if (h->type == TP_HK_ENTRY) {
		if (a->func_of[h->func]) /* NULL: its object is gone (dlclose) */
			on_entry(s, a, t, h);
		return;
	}
	if (h->type == TP_HK_RESTORED || h->type == TP_HK_REHOOKED) {
		/* an unwinder's walk: the frame's return may pass unseen meanwhile */
		for (unsigned i = t->n; i-- > 0;)
			if (t->recs[i].c.sp == h->sp && !(t->recs[i].aux & REC_TAIL)) {
				t->recs[i].aux = h->type == TP_HK_RESTORED ? REC_LOST : 0;
				break;
			}
		return;
	}
	/* tail-called frames above go with the frame that returns */
	s->ret_tsc = h->tsc;
	while (t->n) {
		bool tail = t->recs[t->n - 1].aux & REC_TAIL;

		finish(s, a, t, h->type == TP_HK_RETURN ? h : NULL,
		       h->flags & TP_HK_R_LOST ? " = <return not followed>" : " = <unwound>");
		if (!tail)
			break;
	}
	s->ret_tsc = 0;
}

/* Calls in flight of threads that ended (pthread_exit, or the whole process): after a last
 * drain, they never return. */
void tp_calls_agent_ended(struct session *s, struct agent *a, bool all)
{
	bool drained = all;

	for (int i = 0; i < s->nthreads; i++) {
		struct thread *t = s->threads[i];

		if (!t->n || (!all && syscall(SYS_tgkill, a->pid, t->tid, 0) == 0) ||
		    (!all && errno != ESRCH))
			continue;
		if (!drained)
			tp_calls_agent_drain(s, a);
		drained = true;
		tp_calls_agent_gone(s, a, t);
	}
}

void tp_calls_agent_gone(struct session *s, struct agent *a, struct thread *t)
{
	tp_calls_agent_thread_over(s, a, t, " = <no return>");
}

void tp_calls_agent_thread_over(struct session *s, struct agent *a, struct thread *t,
				const char *why)
{
	clock_anchor(s, a);
	s->ret_tsc = __builtin_ia32_rdtsc();
	while (t->n)
		finish(s, a, t, NULL,
		       t->recs[t->n - 1].aux & REC_LOST ? " = <return not followed>" : why);
	s->ret_tsc = 0;
}

/* The agent waits at the loader's r_brk (a dlopen or a dlclose is done): the image
 * synchronised, the new objects' functions handed over, the agent woken, up to request
 * @seq (read before the rings' heads that were drained). */
static void dl_answer(struct session *s, struct agent *a, uint32_t seq)
{
	uint32_t first = a->n;
	int r;

	if (seq == a->dl_done || !a->im)
		return;
	r = tp_calls_agent_select_more(s, a, &first);
	/* an object gone may leave its addresses to another: its return addresses' rules go */
	tp_calls_agent_walks_reset(a);
	if (r)
		tp_warn("--engine agent: the objects of process %d after a dlopen: %s", a->pid,
			strerror(-r));
	for (uint32_t j = first; j < a->n; j++)
		if (tp_proc_read(a->pid, a->hfs[j].addr, a->orig[j], ORIG_LEN) != ORIG_LEN)
			a->hfs[j].flags = 0; /* nothing to do there */
	tp_calls_agent_plan(s, a, first);
	__atomic_store_n(&a->ctl->nfuncs, a->n, __ATOMIC_RELEASE);
	a->dl_done = seq;
	__atomic_store_n(&a->ctl->dl_done, seq, __ATOMIC_RELEASE);
	syscall(SYS_futex, &a->ctl->dl_done, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A ring being drained: what was read of it, up to the head seen. */
struct ring_rd {
	struct tp_ftp_ring *r;
	const uint8_t *data;
	uint64_t tail, head, given; /* given: the tail the agent was told */
	struct thread **thr;	    /* its records' thread */
	pid_t pid;		    /* its owner's process (a fork child's, with -f) */
	struct session *s;
	uint32_t i;
};

/* Ring @i's records, as far as tail to head went, are checked as untrusted (the agent's).
 * The one at its tail, or NULL at the head; FILL records are passed, THREAD ones taken. */
static const struct tp_hk_rec *peek(struct agent *a, struct ring_rd *rd)
{
	while (rd->tail < rd->head) {
		uint32_t left = a->ctl->ring_size - (uint32_t)(rd->tail & (a->ctl->ring_size - 1));
		const struct tp_hk_rec *h =
		    (const void *)(rd->data + (rd->tail & (a->ctl->ring_size - 1)));

		if (h->size < 8 || h->size > left || (h->size & 7))
			goto broken;
		if (h->type == TP_FTP_REC_FILL) {
			rd->tail += h->size;
			continue;
		}
		if (h->type < TP_HK_ENTRY || h->type > TP_HK_THREAD ||
		    (h->type == TP_HK_ENTRY && h->func >= a->n) ||
		    !tp_calls_agent_size_ok(rd->s, a, h) ||
		    (h->type == TP_HK_THREAD && (int32_t)h->aux <= 0) ||
		    (h->type != TP_HK_THREAD && !*rd->thr))
			goto broken;
		if (h->type != TP_HK_THREAD)
			return h;
		/* the ring's records are another thread's from here */
		*rd->thr = tp_calls_agent_thread(rd->s, rd->pid, (pid_t)h->aux);
		rd->tail += h->size;
		if (!*rd->thr)
			return NULL;
	}
	return NULL;
broken:
	tp_warn("--engine agent: a broken record in ring %u: ring dropped", rd->i);
	rd->tail = rd->head;
	return NULL;
}

/* Give ring @rd's room back up to its tail, and wake its thread if it sleeps waiting for
 * room (the agent's ring.c). */
static void give_back(struct ring_rd *rd)
{
	__atomic_store_n(&rd->r->tail, rd->tail, __ATOMIC_SEQ_CST);
	rd->given = rd->tail;
	if (__atomic_load_n(&rd->r->waiting, __ATOMIC_SEQ_CST) &&
	    __atomic_exchange_n(&rd->r->waiting, 0, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &rd->r->waiting, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Every ring's records up to its head as it is now, merged in time order (the trace's
 * time stamps and the lines' order across threads): the records of one thread are in its
 * order; of several, the earliest time stamp first. */
uint64_t tp_calls_agent_drain(struct session *s, struct agent *a)
{
	struct tp_ftp_ring *rings;
	uint32_t size, dl_seq;
	struct ring_rd rds[RINGS];
	const struct tp_hk_rec *cur[RINGS];
	int n = 0;
	uint64_t done = 0;

	if (!a->ctl)
		return 0; /* an exec'd image that could not be hooked (agent-watch.c) */
	rings = (void *)((uint8_t *)a->ctl + a->ctl->rings_off);
	size = a->ctl->ring_size;
	/* before the heads: every record written before a dlopen's or dlclose's request is
	 * drained before it is answered (a dlclose frees its functions) */
	dl_seq = a->ctl->rdebug ? __atomic_load_n(&a->ctl->dl_seq, __ATOMIC_ACQUIRE) : 0;

	a->full = false;
	clock_anchor(s, a);
	for (uint32_t i = 0; i < RINGS; i++) {
		struct ring_rd *rd = &rds[n];

		rd->r = &rings[i];
		rd->tail = rd->given = rd->r->tail;
		rd->head = __atomic_load_n(&rd->r->head, __ATOMIC_ACQUIRE);
		if (rd->head - rd->tail > size / 8)
			a->full = true;
		if (rd->tail == rd->head)
			continue;
		rd->data = (uint8_t *)a->ctl + a->ctl->data_off + (uint64_t)i * size;
		rd->thr = &a->ring_thr[i];
		/* the process of the ring's owner, written before its first record: a fork
		 * child sharing the block with -f */
		rd->pid = __atomic_load_n(&rd->r->pid, __ATOMIC_ACQUIRE);
		rd->pid = rd->pid > 0 ? rd->pid : a->pid;
		rd->s = s;
		rd->i = i;
		cur[n] = peek(a, rd);
		n++;
	}
	for (;;) {
		int m = -1;

		for (int j = 0; j < n; j++)
			if (cur[j] && (m < 0 || cur[j]->tsc < cur[m]->tsc))
				m = j;
		if (m < 0)
			break;
		one(s, a, *rds[m].thr, cur[m]);
		done++;
		tp_proc_guard_event(); /* TRACEPAD_TEST_CRASH: a record is an event */
		rds[m].tail += cur[m]->size;
		/* room back as it is made: the thread may be waiting for it */
		if (rds[m].tail - rds[m].given >= size / 8)
			give_back(&rds[m]);
		cur[m] = peek(a, &rds[m]);
	}
	for (int j = 0; j < n; j++)
		give_back(&rds[j]);
	if (a->ctl->rdebug)
		dl_answer(s, a, dl_seq);
	return done;
}

/* ---- the job ---- */

/* Threads whose trap at a hook's int3 tracepad took as it attached (a breakpoint stop, which
 * detaching would not deliver) go back to the hooked instruction, whose bytes are the
 * program's again: otherwise they would resume one byte into it.  Other stops stay queued. */
static void traps_back(struct session *s, struct agent *a, pid_t pid)
{
	pid_t tids[4096];
	int n = tp_proc_tasks_of(s->p, pid, tids, 4096);
	struct tp_event keep[64];
	int nkeep = 0;

	for (int i = 0; i < n && i < 4096; i++) {
		while (tp_proc_queued(s->p, tids[i]) && nkeep < 64) {
			struct tp_event ev;
			uint64_t pc;
			bool ours = false;

			if (tp_proc_wait(s->p, &ev))
				break;
			if (ev.kind == TP_EV_BREAKPOINT && !tp_proc_get_pc(ev.tid, &pc))
				for (uint32_t j = 0; j < a->n && !ours; j++)
					ours = a->hfs[j].addr == pc - 1;
			if (ours)
				tp_proc_set_pc(ev.tid, pc - 1);
			else
				keep[nkeep++] = ev;
		}
	}
	for (int k = 0; k < nkeep; k++)
		tp_proc_requeue(s->p, &keep[k]);
}

/* The program still runs (-p, or tracepad interrupted): every thread stopped, the pads out,
 * threads out of the hooks, the block unmapped by the agent, the code compared with what it
 * was, and the program let go.  Frames hooked meanwhile still return through the agent's
 * trampoline, which records nothing any more. */
int tp_calls_agent_leave(struct session *s, struct agent *a)
{
	/* with plugins, tracepad is still attached */
	int r = s->p ? tp_proc_stop_all(s->p, 0) : tp_proc_attach(a->pid, 0, &s->p);

	if (r)
		return r == -ESRCH ? 0 : r;
	r = a->ctl ? tp_calls_agent_unhook(s, a, a->pid) : 0;
	a->live = false;
	tp_calls_agent_unguard(a);
	tp_proc_detach(s->p);
	s->p = NULL;
	tp_proc_guard_detached(0);
	return r == -ESRCH ? 0 : r;
}

struct drain_arg {
	struct session *s;
	struct agent *a;
};

static int drain_between(void *arg)
{
	struct drain_arg *d = arg;

	tp_calls_agent_drain(d->s, d->a);
	return 0;
}

int tp_calls_agent_unhook(struct session *s, struct agent *a, pid_t pid)
{
	struct drain_arg d = {s, a};
	uint64_t busy = 0;
	int r;

	if (!tp_proc_agent_mapped(pid, a->path, a->detach_pc))
		return 0; /* an execve took the agent and its hooks away */
	/* a thread inside a hook may be waiting for room in its ring: drained between calls */
	r = tp_proc_inject_until_out(s->p, pid, tp_proc_loader_task(s->p, pid), a->detach_pc,
				     DETACH_ROUNDS, drain_between, &d, &busy);
	tp_dbg("calls: detach: %d, busy %lld", r, (long long)busy);
	if (!r && busy)
		tp_warn("--engine agent: a thread stayed inside a hook: the agent's block stays "
			"mapped in the program");
	if (!r && !busy)
		traps_back(s, a, pid);
	for (uint32_t j = 0; !r && j < a->n; j++) {
		uint8_t now[ORIG_LEN];

		if (a->func_of[j] && tp_proc_read(pid, a->hfs[j].addr, now, ORIG_LEN) == ORIG_LEN &&
		    memcmp(now, a->orig[j], ORIG_LEN)) {
			tp_err("--engine agent: the code of %s is not what it was",
			       a->func_of[j]->name);
			r = -EIO;
		}
	}
	return r == -ESRCH ? 0 : r;
}

void tp_calls_agent_lost(const struct agent *a)
{
	if (a->ctl && (a->ctl->lost || a->ctl->no_ring || a->ctl->nested || a->ctl->deep))
		tp_warn("--engine agent: calls not followed: %" PRIu64 " lost, %" PRIu64
			" of threads without a ring, %" PRIu64 " in signal handlers inside a "
			"hook, %" PRIu64 " too deep",
			a->ctl->lost, a->ctl->no_ring, a->ctl->nested, a->ctl->deep);
	if (a->walks)
		tp_dbg("--engine agent: backtraces: %" PRIu64 " walked by the agent, %" PRIu64
		       " unwound from stack copies; %" PRIu64 " return addresses' CFA rules%s",
		       a->walks->walked, a->walks->unwound, a->walks->rules,
		       a->walks->full ? " (the table is full)" : "");
}

int tp_calls_agent_run(struct session *s)
{
	const char *no = unsupported(s->o);
	struct agent a = {.fd = -1};
	pid_t pid;
	int r, st = 0, pfd = -1;
	bool ended = false;
	uint64_t next = 0, deadline = 0;

	if (no) {
		tp_err("%s is not supported with --engine agent yet", no);
		return 2;
	}
	s->agent = true;
	if (s->o->trace_dir && tp_calls_trace_open(s, s->o->trace_dir, &s->trace))
		return 2; /* as the ptrace engine: the writer said why */
	r = take(s, &a);
	a.launched = s->launched;
	if (!r)
		r = tp_proc_guard_set("tracepad calls", restore_on_crash, s);
	if (!r && s->o->pid)
		r = tp_calls_agent_orphan(s, a.pid);
	if (!r)
		r = interrupted(s) ? -EINTR : tp_calls_agent_hook(s, &a);
	if (r == -EINTR && s->p && !a.live) {
		/* -p interrupted before its hooks went in: let go as it was, nothing traced */
		tp_proc_detach(s->p);
		s->p = NULL;
		r = 0;
		goto out;
	}
	if (r) {
		/* a launched program goes, an attached one is let go as it was */
		if (s->launched) {
			tp_proc_kill(s->p);
		} else {
			tp_proc_detach(s->p);
			if (a.live)
				tp_calls_agent_leave(s, &a);
		}
		s->p = NULL;
		r = 2;
		goto out;
	}
	s->started = true;
	pid = a.pid;
	/* the ptrace engine's exec and signal lines too (no fork followed); -S: the system
	 * calls' lines as well, at their stops */
	if (s->o->follow || s->events || s->o->syscalls) {
		r = tp_calls_agent_follow(s, &a);
		goto out;
	}
	if (s->o->nplugins) {
		r = tp_calls_agent_watch(s, &a, &ended, &st);
		goto done;
	}
	/* no ptrace stop from here on: the program runs, the rings are drained */
	tp_proc_detach(s->p);
	s->p = NULL;
	tp_proc_guard_detached(pid);
	if (!s->launched)
		pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (s->o->pid && s->o->duration > 0)
		deadline = tp_calls_now_ns() + (uint64_t)(s->o->duration * 1e9);
	while (!(s->o->stop && *s->o->stop) && !(deadline && tp_calls_now_ns() >= deadline)) {
		struct pollfd pf = {.fd = pfd, .events = POLLIN};
		/* drained in batches (a pass a few records long cost more in its system calls
		 * than the records): at once again only while a ring was over 1/8 full */
		bool busy = tp_calls_agent_drain(s, &a) > 0 && a.full;

		if (s->launched) {
			if (waitpid(pid, &st, WNOHANG) == pid &&
			    (WIFEXITED(st) || WIFSIGNALED(st))) {
				ended = true;
				break;
			}
		} else if (pfd < 0 ? kill(pid, 0) && errno == ESRCH : poll(&pf, 1, 0) > 0) {
			ended = true;
			break;
		}
		if (tp_calls_now_ns() >= next) {
			tp_calls_agent_ended(s, &a, false);
			next = tp_calls_now_ns() + 50000000u;
		}
		tp_calls_lines_tick(s, false);
		if (!busy)
			usleep(NAP_US);
	}
	if (pfd >= 0)
		close(pfd);
	tp_calls_agent_drain(s, &a);
	if (!ended && tp_calls_agent_leave(s, &a))
		r = 1;
	else
		r = 0;
done:
	tp_calls_agent_drain(s, &a);
	if (ended)
		tp_calls_agent_ended(s, &a, true);
	/* calls in flight when tracepad was interrupted finish untraced: no line */
	for (int i = 0; i < s->nthreads; i++)
		s->threads[i]->n = 0;
	tp_calls_agent_lost(&a);
	if (ended && s->launched) {
		struct thread *t = tp_calls_agent_thread(s, pid, pid);

		if (t)
			tp_calls_event_exit(s, t, st);
		r = r ? r : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
	} else if (s->launched && !r) {
		/* as strace: the program runs on to its own end, without the hooks */
		r = 128 + *s->o->stop;
	}
out:
	tp_proc_guard_clear();
	tp_calls_agent_clear(&a);
	return r;
}
