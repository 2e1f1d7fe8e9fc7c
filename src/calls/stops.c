/* `tracepad calls`: the stops of the traced processes (calls' entries and returns, forks,
 * execs, exits, the program's own SIGTRAP), the threads they come from, and the lines they
 * print. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#include "arch/arch.h"
#include "base/log.h"
#include "base/text.h"
#include "calls/engine.h"
#include "plugins/plugins.h"

#ifndef TRAP_HWBKPT
#define TRAP_HWBKPT 4
#endif

/* ---- threads ---- */

static struct thread *thread_find(struct session *s, pid_t tid)
{
	if (s->last && s->last->tid == tid)
		return s->last;
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i]->tid == tid)
			return s->last = s->threads[i];
	return NULL;
}

struct thread *tp_calls_thread_of(struct session *s, pid_t tid)
{
	return thread_find(s, tid);
}

struct thread *tp_calls_thread_add(struct session *s, pid_t tid, pid_t pid, struct image *im,
				   bool report)
{
	struct thread *t = calloc(1, sizeof(*t));
	struct thread **n = realloc(s->threads, (s->nthreads + 1) * sizeof(*n));

	if (n)
		s->threads = n;
	if (!t || !n) {
		free(t);
		s->err = -ENOMEM;
		return NULL;
	}
	t->tid = tid;
	t->pid = pid;
	t->img = im;
	t->report = report;
	s->threads[s->nthreads++] = t;
	return t;
}

void tp_calls_thread_del(struct session *s, struct thread *t)
{
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i] == t) {
			s->threads[i] = s->threads[--s->nthreads];
			break;
		}
	if (s->last == t)
		s->last = NULL;
	free(t->recs);
	free(t);
}

void tp_calls_thread_exec(struct session *s, struct thread *t, pid_t tid)
{
	for (int i = 0; i < s->nthreads;) {
		struct thread *o = s->threads[i];

		if (o != t && o->pid == t->pid) {
			tp_calls_thread_del(s, o);
			continue;
		}
		i++;
	}
	t->tid = tid;
	t->n = 0;
}

/* Records of calls in flight a thread gets room for at first. */
#define RECS_MIN 16

/* A new record of a call in flight of @t; NULL and s->err set when out of memory. */
struct rec *tp_calls_rec_push(struct session *s, struct thread *t)
{
	if (t->n == t->cap) {
		unsigned ncap = t->cap ? 2 * t->cap : RECS_MIN;
		struct rec *n = realloc(t->recs, ncap * sizeof(*n));

		if (!n) {
			s->err = -ENOMEM;
			return NULL;
		}
		t->recs = n;
		t->cap = ncap;
	}
	return &t->recs[t->n++];
}

static int recs_copy(struct session *s, struct thread *to, const struct thread *from)
{
	to->n = 0;
	for (unsigned i = 0; i < from->n; i++) {
		struct rec *r = tp_calls_rec_push(s, to);

		if (!r)
			return -ENOMEM;
		*r = from->recs[i];
		r->c.tid = to->tid;
		r->c.pid = to->pid;
	}
	return 0;
}

int tp_calls_add_pid(struct session *s, pid_t pid)
{
	pid_t *n;

	for (int i = 0; i < s->npids; i++)
		if (s->pids[i] == pid)
			return 0;
	n = realloc(s->pids, (s->npids + 1) * sizeof(*s->pids));
	if (!n)
		return -ENOMEM;
	s->pids = n;
	s->pids[s->npids++] = pid;
	return 0;
}

/* ---- output ---- */

/* Calls of @t above index @keep that will never return here (longjmp, exception, exit). */
static void drop_recs(struct session *s, struct thread *t, unsigned keep, const char *why)
{
	while (t->n > keep) {
		struct rec *rc = &t->recs[--t->n];

		if (!t->report || !rc->f->shown || tp_calls_too_deep(s, t->n))
			continue;
		if (!s->o->summary && !s->o->min_ns && tp_calls_line_wanted(s, rc))
			tp_calls_line_call(s, t, rc, t->n, why);
		if (s->trace)
			tp_calls_trace_return(s->trace, rc, why + 3);
	}
}

/* The summary's entry of @f in process @pid, found or made (f->stat: the last one). */
struct stat_ent *tp_calls_stat_find(struct session *s, pid_t pid, struct func *f)
{
	struct stat_ent *e;

	if (f->stat && f->stat->pid == pid)
		return f->stat;
	for (e = s->stats; e; e = e->next)
		if (e->pid == pid && !strcmp(e->function, f->name) &&
		    !strcmp(e->object, f->obj->base))
			return f->stat = e;
	e = calloc(1, sizeof(*e));
	if (e) {
		e->object = strdup(f->obj->base);
		e->function = strdup(f->name);
	}
	if (!e || !e->object || !e->function) {
		if (e) {
			free(e->object);
			free(e->function);
		}
		free(e);
		s->err = -ENOMEM;
		return NULL;
	}
	e->min = UINT64_MAX;
	e->pid = pid;
	e->next = s->stats;
	s->stats = e;
	return f->stat = e;
}

static const struct tp_proto *proto_of(struct session *s, struct func *f)
{
	if (!f->proto_done) {
		f->proto = tp_protos_find(s->protos, f->obj->path, f->name, f->addr - f->obj->bias);
		f->proto_done = true;
	}
	return f->proto;
}

static bool get_fp(pid_t tid, const struct tp_proto *p, struct user_fpregs_struct *fp)
{
	return p && tp_proto_needs_fp(p) && !tp_proc_get_fpregs(tid, fp);
}

/* ---- SIGTRAP of the program ---- */

#define TRAP_BIT (1ULL << (SIGTRAP - 1))

/* Scratch space in stopped task @tid's stack, below the red zone. */
static uint64_t scratch(pid_t tid)
{
	struct user_regs_struct r;

	return tp_proc_get_regs(tid, &r) ? 0 : ((r.rsp - 4096) & ~63ULL);
}

/* Read the program's SIGTRAP disposition (rt_sigaction injected into @tid). */
static void trap_capture(struct image *im, pid_t tid)
{
	uint64_t at = scratch(tid), args[6] = {SIGTRAP, 0, at, 8};
	int64_t ret = -1;

	if (!at || tp_bp_inject_syscall(im->bps, tid, SYS_rt_sigaction, args, &ret) || ret ||
	    tp_proc_read(im->pid, at, im->trap_act, sizeof(im->trap_act)) !=
		(ssize_t)sizeof(im->trap_act))
		return;
	im->trap_custom = im->trap_act[0] != (uint64_t)(uintptr_t)SIG_DFL;
	tp_dbg("calls: SIGTRAP disposition of %d: 0x%llx flags 0x%llx", im->pid,
	       (unsigned long long)im->trap_act[0], (unsigned long long)im->trap_act[1]);
}

/* A new image: SIGTRAP may be ignored (inherited) or caught (attached). */
void tp_calls_trap_init(struct image *im, pid_t tid)
{
	struct tp_sig_masks m;

	if (!tp_proc_sig_masks(tid, &m) && ((m.ignored | m.caught) & TRAP_BIT))
		trap_capture(im, tid);
}

/* After a stop at one of our int3s: if the kernel reset SIGTRAP to SIG_DFL (it does when
 * the int3 comes while SIGTRAP is ignored or blocked), put the program's disposition back;
 * a handler was reset only because SIGTRAP was blocked, so block it again. */
static void trap_check(struct image *im, pid_t tid)
{
	uint64_t at, mask = TRAP_BIT;
	struct tp_sig_masks m;
	int64_t ret;

	if (tp_proc_sig_masks(tid, &m) || ((m.ignored | m.caught) & TRAP_BIT))
		return;
	tp_dbg("calls: SIGTRAP of %d was reset, restoring handler 0x%llx", tid,
	       (unsigned long long)im->trap_act[0]);
	at = scratch(tid);
	if (!at || tp_proc_write(im->pid, at, im->trap_act, sizeof(im->trap_act)) ||
	    tp_proc_write(im->pid, at + 64, &mask, 8))
		return;
	uint64_t act[6] = {SIGTRAP, at, 0, 8}, blk[6] = {SIG_BLOCK, at + 64, 0, 8};

	tp_bp_inject_syscall(im->bps, tid, SYS_rt_sigaction, act, &ret);
	if (im->trap_act[0] != (uint64_t)(uintptr_t)SIG_IGN)
		tp_bp_inject_syscall(im->bps, tid, SYS_rt_sigprocmask, blk, &ret);
}

/* ---- stops ---- */

static void on_entry(struct session *s, struct thread *t, struct func *f,
		     const struct tp_bp_stop *st, struct user_regs_struct *regs, uint64_t now)
{
	struct image *im = t->img;
	struct rec tmp, *rc;
	uint64_t caller = 0;
	/* A caller-sensitive function whose return could not be caught at its return site
	 * gets an entry-only line. */
	bool hooked = f->hooked && !st->no_return;

	if (hooked) {
		drop_recs(s, t, st->depth - 1, " = <unwound>");
		rc = tp_calls_rec_push(s, t);
		if (!rc) /* the tracing ends (s->err): this call is not followed */
			rc = &tmp;
		else
			s->entry_rec = (int)(rc - t->recs);
	} else {
		drop_recs(s, t, st->depth, " = <unwound>");
		rc = &tmp;
	}
	if (!tp_bp_real_return(im->bps, t->tid, regs->rsp, &caller))
		tp_proc_read(im->pid, regs->rsp, &caller, 8);
	rc->f = f;
	rc->npcs = 0;
	rc->aux = 0;
	rc->entry_tsc = s->wake_tsc; /* until the thread runs on (stop_end) */
	rc->stall0 = t->stall_tsc;
	if (f->kind == F_SIGACTION && regs->rdi == SIGTRAP && regs->rsi)
		tp_proc_read(im->pid, regs->rsi, &rc->aux, 8);
	rc->args[0] = 0;
	rc->c = (struct tracepad_call){
	    .pid = t->pid,
	    .tid = t->tid,
	    .object = f->obj->base,
	    .function = f->name,
	    .func = f->addr,
	    .args = {regs->rdi, regs->rsi, regs->rdx, regs->rcx, regs->r8, regs->r9},
	    .sp = regs->rsp,
	    .caller = caller,
	    .depth = hooked ? t->n - 1 : t->n,
	    .entry_ns = now,
	};
	tp_calls_callers_enter(t, rc);
	if (!t->report || !f->shown)
		return;
	if (tp_calls_too_deep(s, rc->c.depth)) {
		tp_plugins_call(s->plugins, &rc->c);
		return;
	}
	struct stat_ent *e = tp_calls_stat_of(s, t->pid, f);

	if (!e)
		return;
	e->calls++;
	if (s->need_args) {
		const struct tp_proto *p = proto_of(s, f);
		struct user_fpregs_struct fp;

		tp_proto_format_args(p, t->pid, regs, get_fp(t->tid, p, &fp) ? &fp : NULL, rc->args,
				     sizeof(rc->args));
	}
	if (s->o->bt) {
		struct user_regs_struct r = *regs;
		int n;

		r.rip = f->addr;
		n = tp_calls_backtrace(s, t, &r, rc->pcs, s->o->bt + 1 < 64 ? s->o->bt + 1 : 64);
		rc->npcs = n > 0 ? n : 0;
	}
	tp_plugins_call(s->plugins, &rc->c);
	if (s->trace && rc != &tmp && hooked)
		s->entry_trace = true; /* at stop_end, with the time the call starts */
	else if (s->trace)
		tp_calls_trace_call(s->trace, rc);
	if (!s->o->summary && (s->o->entry || !hooked) && tp_calls_line_wanted(s, rc)) {
		int npcs = rc->npcs;

		if (hooked)
			rc->npcs = 0; /* the backtrace goes with the completed call */
		tp_calls_line_call(s, t, rc, rc->c.depth,
				   hooked      ? " ..."
				   : f->hooked ? " = <return not followed>"
					       : "");
		rc->npcs = npcs;
	}
}

/* errno's place in the thread's TLS, once libc is there; also for the return stubs. */
static bool errno_known(struct image *im)
{
	if (!im->errno_state && im->libc) {
		im->errno_state = -1;
		if (!tp_errno_tpoff(im->pid, im->libc->path, im->libc->bias, &im->errno_tpoff)) {
			im->errno_state = 1;
			tp_bps_set_errno(im->bps, im->errno_tpoff);
		}
	}
	return im->errno_state > 0;
}

static int errno_of(struct thread *t, const struct user_regs_struct *regs)
{
	int32_t v;

	if (!errno_known(t->img) ||
	    tp_proc_read(t->img->pid, regs->fs_base + t->img->errno_tpoff, &v, 4) != 4)
		return -1;
	return v;
}

/* A call returned: at its trampoline stop (@regs, @fp NULL: read when needed), or earlier
 * through its return stub (@st->async: @regs and @fp hold what the stub saved). */
static void on_return(struct session *s, struct thread *t, const struct tp_bp_stop *st,
		      struct user_regs_struct *regs, const struct user_fpregs_struct *fp)
{
	struct image *im = t->img;
	char ret[600], tail[700];
	struct stat_ent *e;
	struct rec *rc;
	bool failed = false;
	uint64_t ret_tsc, wall, stalled;
	int k = -1;

	for (int i = (int)t->n - 1; i >= (int)st->depth; i--)
		if (t->recs[i].c.sp == st->sp) {
			k = i;
			break;
		}
	if (k < 0) {
		/* A call whose record was dropped (its frame looked unwound). */
		drop_recs(s, t, st->depth, " = <unwound>");
		return;
	}
	drop_recs(s, t, k + 1, " = <unwound>");
	rc = &t->recs[k];
	rc->c.retval = st->rax;
	/* The program's time of the return: its stub's time stamp, or when it trapped. */
	ret_tsc = st->async ? st->tsc : s->wake_tsc - (s->wake_tsc > s->lat_stop ? s->lat_stop : 0);
	if (ret_tsc < t->run_tsc)
		ret_tsc = t->run_tsc; /* it returned after it last ran on */
	if (ret_tsc > t->ret_tsc)
		t->ret_tsc = ret_tsc;
	wall = ret_tsc > rc->entry_tsc ? ret_tsc - rc->entry_tsc : 0;
	stalled = t->stall_tsc - rc->stall0;
	rc->c.return_ns = rc->c.entry_ns + tp_calls_ticks_ns(s, wall); /* as the trace has it */
	if (st->async)
		tp_calls_entry_stamp(s, t, rc, st->entry_tsc, ret_tsc, stalled, &wall);
	if (rc->f->kind == F_RESOLVER) {
		tp_calls_resolved(s, im, t->tid, rc->f, st->rax);
		goto out;
	}
	if (rc->f->kind == F_SIGACTION && rc->c.args[0] == SIGTRAP && rc->c.args[1] &&
	    (int)st->rax == 0) {
		/* The trampoline's int3 may already have reset the handler the call set (when
		 * it set SIG_IGN): the rest of the disposition is the kernel's, the handler
		 * the one the call passed. */
		trap_capture(im, t->tid);
		im->trap_act[0] = rc->aux;
		im->trap_custom = rc->aux != (uint64_t)(uintptr_t)SIG_DFL;
	}
	if (!t->report || !rc->f->shown)
		goto out;
	if (tp_calls_too_deep(s, k)) {
		tp_plugins_ret(s->plugins, &rc->c);
		goto out;
	}
	{
		const struct tp_proto *p = proto_of(s, rc->f);
		struct user_fpregs_struct own;
		/* Its own time: without the stops of the calls it made. */
		uint64_t d = tp_calls_ticks_ns(s, wall > stalled ? wall - stalled : 0);
		int err = -1;

		regs->rip = st->ret_addr;
		if (p && tp_proto_failed(p, regs))
			err = !st->async ? errno_of(t, regs) : st->err_valid ? st->err : -1;
		if (!fp && get_fp(t->tid, p, &own))
			fp = &own;
		if (s->need_args)
			tp_proto_format_ret(p, t->pid, regs, fp, err, ret, sizeof(ret), &failed);
		else
			failed = p && tp_proto_failed(p, regs);
		e = tp_calls_stat_of(s, t->pid, rc->f);
		if (!e)
			return;
		e->returns++;
		e->errors += failed;
		e->total += d;
		if (d < e->min)
			e->min = d;
		if (d > e->max)
			e->max = d;
		tp_plugins_ret(s->plugins, &rc->c);
		if (s->trace)
			tp_calls_trace_return(s->trace, rc, s->need_args ? ret : "");
		if (!s->o->summary && d >= s->o->min_ns && tp_calls_line_wanted(s, rc)) {
			if (s->o->durations)
				snprintf(tail, sizeof(tail), " = %s <%" PRIu64 ".%06" PRIu64 ">",
					 ret, d / 1000000000u, d / 1000 % 1000000);
			else
				snprintf(tail, sizeof(tail), " = %s", ret);
			tp_calls_line_call(s, t, rc, k, tail);
		}
	}
out:
	t->n = k;
	drop_recs(s, t, st->depth, " = <unwound>");
}

void tp_calls_async_return(void *arg, pid_t tid, const struct tp_bp_stop *st)
{
	struct session *s = arg;
	struct thread *t = thread_find(s, tid);
	struct user_regs_struct regs = {.rax = st->rax, .rdx = st->rdx};
	struct user_fpregs_struct fp = {0};

	if (!t)
		return;
	memcpy(fp.xmm_space, &st->xmm0, 8);
	s->ret_tsc = st->tsc;
	on_return(s, t, st, &regs, &fp);
	s->ret_tsc = 0;
}

/* Report the returns without a stop of every thread of @im; @t is at a stop with stack
 * pointer @sp, and its calls left without returning are printed too (before an object they
 * belong to goes away). */
static void reap_image(struct session *s, struct image *im, struct thread *t, uint64_t sp)
{
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i]->img == im && s->threads[i] != t)
			tp_bp_reap(im->bps, s->threads[i]->tid, true, 0);
	tp_bp_reap(im->bps, t->tid, false, sp);
	drop_recs(s, t, tp_bp_depth(im->bps, t->tid), " = <unwound>");
}

/* May a call of @f return without a stop?  Not where tracepad acts on the return
 * (IFUNC resolvers, sigaction), nor in a vfork child on its parent's memory. */
static unsigned async_ok(struct session *s, struct thread *t, struct func *f)
{
	if (!s->async || t->img->pid != t->pid || !f || f->kind != F_TRACED)
		return 0;
	/* a return stub keeps rax, rdx and xmm0, not st0: a long double needs the stop */
	if (s->need_args && tp_proto_ret_x87(proto_of(s, f)))
		return 0;
	errno_known(t->img);
	return TP_BP_HIT_ASYNC;
}

/* The end of a breakpoint stop of @t, just before it runs on: the time it was stopped
 * counts as stalled, and the call it entered starts now (as the program sees it). */
static void stop_end(struct session *s, struct thread *t)
{
	uint64_t now = __rdtsc(), go = now + s->lat_resume;
	uint64_t trap = s->wake_tsc - (s->wake_tsc > s->lat_stop ? s->lat_stop : 0);

	/* The estimates stay in the order of what the thread did (it trapped after it last
	 * ran on and after its calls returned), so that a call's own time is never less than
	 * that of a call it made. */
	if (trap < t->run_tsc)
		trap = t->run_tsc;
	if (trap < t->ret_tsc)
		trap = t->ret_tsc;
	if (go < trap)
		go = trap;
	t->stall_tsc += go - trap;
	t->run_tsc = go;
	if (s->entry_rec >= 0 && (unsigned)s->entry_rec < t->n) {
		struct rec *rc = &t->recs[s->entry_rec];

		rc->entry_tsc = go;
		rc->go_tsc = now;
		rc->stall0 = t->stall_tsc;
		rc->c.entry_ns = tp_calls_tsc_ns(s, go);
		if (s->entry_trace && s->trace)
			tp_calls_trace_call(s->trace, rc);
	}
	s->entry_rec = -1;
	s->entry_trace = false;
}

/* A stop at one of our int3s; the task is resumed with signal @sig (0: none). */
static int on_breakpoint(struct session *s, const struct tp_event *ev, int sig)
{
	struct thread *t = thread_find(s, ev->tid);
	struct user_regs_struct regs;
	struct tp_bp_stop st;
	struct image *im;
	uint64_t now, stop_sp;
	struct func *f;
	struct rec *rc;
	int r;

	if (!t && (im = tp_calls_image_of(s, ev->pid)))
		t = tp_calls_thread_add(s, ev->tid, ev->pid, im, true); /* a thread known late */
	if (!t && s->err)
		return s->err;
	if (!t)
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), SIGTRAP);
	s->wake_tsc = __rdtsc();
	s->entry_rec = -1;
	s->entry_trace = false;
	im = t->img;
	if (ev->has_regs)
		regs = ev->regs;
	else if (tp_proc_get_regs(ev->tid, &regs))
		return 0; /* killed meanwhile: its exit follows */
	stop_sp = regs.rip - 1 == tp_bp_trampoline(im->bps) ? regs.rsp - 8 : regs.rsp;
	if (t->rehook_at && stop_sp >= t->rehook_at) {
		tp_bp_rehook_thread(im->bps, t->tid, stop_sp - 1);
		t->rehook_at = 0;
	}
	f = tp_calls_func_find(im, regs.rip - 1);
	if (f && f->kind == F_EXEC)
		reap_image(s, im, t, regs.rsp); /* the returns go with the old image */
	if (f && f->kind == F_EXIT) {
		r = tp_calls_exit_detour(s, im, t, &regs);
		if (r)
			return r < 0 && r != -ESRCH ? r : 0;
	}
	r = tp_bp_hit(im->bps, ev->tid, &regs, TP_BP_HIT_STAY | async_ok(s, t, f), &st);
	if (r == 0) {
		tp_calls_event_signal(s, t, &ev->si); /* the program's own int3 */
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), SIGTRAP);
	}
	if (r < 0) {
		if (r == -ESRCH)
			return 0;
		tp_err("thread %d at 0x%llx: %s", ev->tid, (unsigned long long)regs.rip,
		       r == -ENOENT ? "a return through tracepad's trampoline with no call known"
				    : strerror(-r));
		return r;
	}
	now = tp_calls_now_ns();
	s->cur = t;
	s->cur_regs = regs;
	s->cur_regs.rip = st.kind == TP_BP_STOP_ENTRY	 ? st.func
			  : st.kind == TP_BP_STOP_RETURN ? st.ret_addr
							 : regs.rip - 1;
	if (st.kind == TP_BP_STOP_RETURN) {
		on_return(s, t, &st, &regs, NULL);
	} else if (f) { /* the entry's function, found before the hit */
		switch (f->kind) {
		case F_EXEC:
		case F_EXIT:
		case F_TRACED:
		case F_SIGACTION:
			on_entry(s, t, f, &st, &regs, now);
			break;
		case F_RESOLVER:
			if (st.no_return)
				break;
			drop_recs(s, t, st.depth - 1, " = <unwound>");
			rc = tp_calls_rec_push(s, t);
			if (!rc)
				return -ENOMEM;
			*rc = (struct rec){.f = f, .c = {.sp = regs.rsp, .tid = t->tid}};
			break;
		case F_RBRK: {
			int32_t state = -1;

			/* RT_CONSISTENT (0): the loader is done adding or removing objects. */
			if (tp_proc_read(im->pid, im->rdebug + TP_ARCH_R_DEBUG_STATE, &state, 4) ==
				4 &&
			    state == 0) {
				/* Returns of functions of an object on its way out are printed
				 * while its symbols are there. */
				reap_image(s, im, t, regs.rsp);
				/* The start-up's objects are relocated when the loader says they
				 * are consistent, a dlopen'ed one only after: its IFUNC resolvers
				 * are left to the loader (their returns are hooked). */
				im->live = !im->started;
				im->started = true;
				tp_calls_objects_sync(s, im, t->tid);
				im->live = false;
				s->objects_gen++;
			}
			break;
		}
		case F_UNWIND:
			tp_bp_unhook_thread(im->bps, t->tid);
			break;
		case F_BACKTRACE: {
			uint64_t back = 0;
			struct object *bo;

			tp_bp_unhook_thread(im->bps, t->tid);
			t->rehook_at = regs.rsp;
			/* Hook the frames again as soon as it returns: a breakpoint where it
			 * returns to (else at the thread's next stop above it). */
			if (!tp_bp_real_return(im->bps, t->tid, regs.rsp, &back))
				tp_proc_read(im->pid, regs.rsp, &back, 8);
			bo = tp_calls_object_at(im, back);
			if (bo && !tp_calls_func_find(im, back))
				tp_calls_func_add(s, im, t->tid, bo, back,
						  "<after _Unwind_Backtrace>", F_REHOOK);
			break;
		}
		case F_REHOOK:
			if (t->rehook_at) {
				tp_bp_rehook_thread(im->bps, t->tid, regs.rsp - 1);
				t->rehook_at = 0;
			}
			break;
		case F_CATCH:
			tp_bp_rehook_thread(im->bps, t->tid, regs.rsp - 1);
			drop_recs(s, t, tp_bp_depth(im->bps, t->tid), " = <unwound>");
			break;
		}
	}
	s->cur = NULL;
	if (im->trap_custom)
		trap_check(im, t->tid);
	stop_end(s, t);
	return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), sig);
}

static void image_release(struct session *s, struct image *im)
{
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i]->img == im)
			return;
	tp_calls_image_free(s, im);
}

static int on_fork(struct session *s, const struct tp_event *ev)
{
	struct thread *pt = thread_find(s, ev->tid), *ct;
	pid_t child = ev->new_tid;
	bool traced = false;
	pid_t tids[1];

	traced = tp_proc_tasks_of(s->p, child, tids, 1) > 0;
	if (!pt || !traced)
		goto resume;
	/* Returns already made are the parent's alone. */
	tp_bp_reap(pt->img->bps, pt->tid, false, 0);
	if (ev->vm_shared) {
		/* vfork: the child runs on the parent's memory and stack until it execs. */
		ct = tp_calls_thread_add(s, child, child, pt->img, s->o->follow);
		if (!ct)
			return -ENOMEM;
		tp_bp_copy_shadow(pt->img->bps, pt->tid, pt->img->bps, child);
		if (recs_copy(s, ct, pt))
			return -ENOMEM;
	} else {
		struct image *ci = tp_calls_image_fork(s, pt->img, child);

		if (!ci)
			return -ENOMEM;
		tp_bp_copy_shadow(pt->img->bps, pt->tid, ci->bps, child);
		if (s->o->follow) {
			ct = tp_calls_thread_add(s, child, child, ci, true);
			if (!ct || recs_copy(s, ct, pt) || tp_calls_add_pid(s, child))
				return -ENOMEM;
			tp_plugins_process(s->plugins, child, TRACEPAD_PROC_START);
		} else {
			/* Not followed: the child gets its original bytes back and goes. */
			int r = tp_bp_remove_all(ci->bps);

			if (r)
				tp_warn("child %d: restoring its memory: %s", child, strerror(-r));
			tp_proc_detach_tgid(s->p, child);
			tp_calls_image_free(s, ci);
			tp_proc_resume_all(s->p);
			traced = false;
		}
	}
resume:
	if (traced)
		tp_proc_resume(s->p, child, tp_calls_resume(s), 0);
	return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
}

static int on_exec(struct session *s, const struct tp_event *ev)
{
	struct thread *t = thread_find(s, ev->old_tid ? ev->old_tid : ev->tid);
	struct image *old;

	if (!t)
		t = tp_calls_thread_add(s, ev->tid, ev->pid, NULL, true);
	if (!t)
		return -ENOMEM;
	old = t->img;
	t->pid = ev->pid;
	tp_calls_thread_exec(s, t, ev->tid);
	t->rehook_at = 0;
	if (old && old->pid != ev->pid) {
		/* A vfork child leaves its parent's memory. */
		tp_bp_drop_thread(old->bps, ev->old_tid ? ev->old_tid : ev->tid);
		if (!s->o->follow) {
			tp_calls_thread_del(s, t);
			return tp_proc_detach_tgid(s->p, ev->pid);
		}
	}
	t->img = NULL;
	if (old)
		image_release(s, old);
	t->img = tp_calls_image_new(s, ev->pid, ev->tid, false);
	if (!t->img || tp_calls_add_pid(s, ev->pid))
		return -ENOMEM;
	tp_calls_trap_init(t->img, ev->tid);
	t->report = true;
	tp_calls_event_exec(s, t);
	tp_plugins_process(s->plugins, ev->pid, TRACEPAD_PROC_START);
	return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
}

static void on_exit_stop(struct session *s, const struct tp_event *ev)
{
	struct thread *t = thread_find(s, ev->tid);
	pid_t tids[256];
	int n;
	bool all = true;

	if (!t)
		return;
	t->exiting = true;
	if (t->img)
		tp_bp_reap(t->img->bps, t->tid, false, 0);
	drop_recs(s, t, 0, " = <no return>");
	if (!t->report)
		return;
	tp_plugins_thread(s->plugins, t->pid, t->tid, TRACEPAD_THREAD_EXIT);
	if (t->img->pid != t->pid)
		return;
	n = tp_proc_tasks_of(s->p, t->pid, tids, 256);
	for (int i = 0; i < n && i < 256; i++) {
		struct thread *o = thread_find(s, tids[i]);

		if (o && !o->exiting)
			all = false;
	}
	if (all && !t->img->exit_reported) {
		t->img->exit_reported = true;
		s->cur = t;
		tp_plugins_process(s->plugins, t->pid, TRACEPAD_PROC_EXIT);
		s->cur = NULL;
	}
}

static void on_exited(struct session *s, const struct tp_event *ev)
{
	struct thread *t = thread_find(s, ev->tid);
	struct image *im;

	if (ev->leader && ev->pid == tp_proc_pid(s->p) && s->launched)
		s->status = ev->status;
	if (!t)
		return;
	im = t->img;
	drop_recs(s, t, 0, " = <no return>");
	if (ev->leader)
		tp_calls_event_exit(s, t, ev->status);
	if (im)
		tp_bp_drop_thread(im->bps, t->tid);
	tp_calls_thread_del(s, t);
	if (im)
		image_release(s, im);
}

/* A signal comes as a call is about to return through the trampoline: the return is
 * taken first (as if its int3 had run), so that the handler's frame holds the real return
 * address, then the signal is delivered there with its siginfo. */
static int signal_at_trampoline(struct session *s, const struct tp_event *ev)
{
	struct tp_event bev = *ev;

	if (tp_proc_get_regs(ev->tid, &bev.regs))
		return 0; /* gone: its exit follows */
	bev.kind = TP_EV_BREAKPOINT;
	bev.regs.rip++;
	bev.has_regs = true;
	return on_breakpoint(s, &bev, ev->sig);
}

int tp_calls_handle(struct session *s, const struct tp_event *ev)
{
	struct thread *t;

	switch (ev->kind) {
	case TP_EV_BREAKPOINT:
		return on_breakpoint(s, ev, 0);
	case TP_EV_SIGNAL:
		t = thread_find(s, ev->tid);
		if (t && t->img && ev->sig == SIGSEGV && tp_bp_stub_fault(t->img->bps, t->tid) > 0)
			return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
		if (t && t->img) {
			int r;

			tp_bp_reap(t->img->bps, t->tid, false, 0);
			r = tp_bp_signal_stop(t->img->bps, t->tid, &ev->si);
			if (r == 2) {
				tp_calls_event_signal(s, t, &ev->si);
				return signal_at_trampoline(s, ev);
			}
			/* Its SIGTRAP disposition may have been reset by the steps. */
			if (r > 0 && t->img->trap_custom)
				trap_check(t->img, t->tid);
		}
		if (ev->sig == SIGTRAP && ev->si.si_code == TRAP_HWBKPT && t && t->img &&
		    t->img->watch_tid == ev->tid) {
			tp_calls_watch_hit(s, t->img, ev->tid);
			return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
		}
		tp_calls_event_signal(s, t, &ev->si);
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), ev->sig);
	case TP_EV_CLONE:
		t = thread_find(s, ev->tid);
		if (t && !thread_find(s, ev->new_tid)) {
			tp_calls_thread_add(s, ev->new_tid, t->pid, t->img, t->report);
			if (t->report)
				tp_plugins_thread(s->plugins, t->pid, ev->new_tid,
						  TRACEPAD_THREAD_START);
		}
		tp_proc_resume(s->p, ev->new_tid, tp_calls_resume(s), 0);
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
	case TP_EV_FORK:
		return on_fork(s, ev);
	case TP_EV_EXEC:
		return on_exec(s, ev);
	case TP_EV_EXIT:
		on_exit_stop(s, ev);
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
	case TP_EV_EXITED:
		on_exited(s, ev);
		return 0;
	case TP_EV_SYSCALL:
		return tp_calls_syscall_stop(s, ev);
	default:
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
	}
}

bool tp_calls_trap_filter(void *arg, pid_t pid, const struct user_regs_struct *regs)
{
	struct image *im = tp_calls_image_of(arg, pid);

	return im && tp_bp_owns_trap(im->bps, regs->rip);
}
