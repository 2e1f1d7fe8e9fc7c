/* `tracepad calls --engine agent -f` (or -S): the processes stay under ptrace for their process
 * events only (fork, exec, exit, signals; with -S their system calls), never at a call.  A fork
 * child shares its parent's block and pads (the agent's atfork handler has it record as a process
 * of its own: its rings name its pid); an exec'd image is run to its entry point and hooked anew,
 * with a block of its own.  The rings are drained between events and at each tick. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "base/log.h"
#include "calls/agent-priv.h"
#include "proc/inject.h"

#define AGENTS_MAX 64  /* images hooked in one run (each exec makes one) */
#define PROCS_MAX 4096 /* processes followed at once */
#define TICK_US 1000   /* drains while no process event comes */

struct proc {
	pid_t pid;
	struct agent *a;   /* the block its pads write into; NULL: not hooked */
	uint64_t alo, ahi; /* the agent's text, once a -S stop looked (ahi 1: none) */
	uint64_t entry;	   /* exec'd, on its way to this entry point (an int3 there) */
	uint8_t orig;	   /* the byte under that int3 */
	bool to_main;	   /* a static program: entry is its main */
};

struct family {
	struct session *s;
	struct agent *ag[AGENTS_MAX];
	int nag;
	struct proc pr[PROCS_MAX];
	int npr;
	bool ended;
};

static void drain_all(struct family *f)
{
	for (int i = 0; i < f->nag; i++)
		tp_calls_agent_drain(f->s, f->ag[i]);
}

static struct proc *proc_of(struct family *f, pid_t pid)
{
	for (int i = 0; i < f->npr; i++)
		if (f->pr[i].pid == pid)
			return &f->pr[i];
	if (f->npr == PROCS_MAX)
		return NULL;
	f->pr[f->npr] = (struct proc){.pid = pid};
	return &f->pr[f->npr++];
}

static void proc_del(struct family *f, pid_t pid)
{
	for (int i = 0; i < f->npr; i++)
		if (f->pr[i].pid == pid) {
			f->pr[i] = f->pr[--f->npr];
			return;
		}
}

static struct thread *thread_get(struct session *s, pid_t pid, pid_t tid)
{
	struct thread *t = tp_calls_thread_of(s, tid);

	return t ? t : tp_calls_thread_add(s, tid, pid, NULL, true);
}

/* The parent is stopped at the fork: its records up to it are in the rings.  A fork child
 * inherits the frames in flight (its shadow stack is a copy): they return in it as well. */
static int on_fork(struct family *f, const struct tp_event *ev)
{
	struct session *s = f->s;
	struct proc *pp = proc_of(f, ev->pid), *cp;
	struct thread *pt, *ct;

	drain_all(f);
	pt = thread_get(s, ev->pid, ev->tid);
	ct = thread_get(s, ev->new_tid, ev->new_tid);
	cp = proc_of(f, ev->new_tid);
	if (!pt || !ct || !cp || tp_calls_add_pid(s, ev->new_tid))
		return -ENOMEM;
	cp->a = pp ? pp->a : NULL;
	/* a vfork child runs on its parent's thread-local state: its hooked calls, if any,
	 * are recorded as the parent's (docs/INTERNALS.md) */
	for (unsigned i = 0; !ev->vm_shared && i < pt->n; i++) {
		struct rec *r = tp_calls_rec_push(s, ct);

		if (!r)
			return -ENOMEM;
		*r = pt->recs[i];
		r->c.tid = ct->tid;
		r->c.pid = ct->pid;
	}
	tp_proc_resume(s->p, ev->new_tid, tp_calls_resume(s), 0);
	return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
}

/* The rings that threads of @pid held in every block are free again (its image is gone). */
static void rings_free(struct family *f, pid_t pid)
{
	for (int i = 0; i < f->nag; i++) {
		struct tp_hk_ctl *c = f->ag[i]->ctl;
		struct tp_ftp_ring *rings = (void *)((uint8_t *)c + c->rings_off);

		for (uint32_t k = 0; k < c->nrings; k++)
			if (__atomic_load_n(&rings[k].pid, __ATOMIC_ACQUIRE) == pid) {
				uint64_t *own = (uint64_t *)(void *)&rings[k].tid;

				__atomic_store_n(own, 0, __ATOMIC_RELEASE);
			}
	}
}

/* An execve: the old image's calls in flight end untraced (as the ptrace engine has it);
 * the new one runs to its entry point, where it is hooked. */
static int on_exec(struct family *f, const struct tp_event *ev)
{
	struct session *s = f->s;
	struct proc *p = proc_of(f, ev->pid);
	struct thread *t;
	uint64_t entry = 0;
	int r;

	drain_all(f);
	t = tp_calls_thread_of(s, ev->old_tid ? ev->old_tid : ev->tid);
	if (!t)
		t = thread_get(s, ev->pid, ev->tid);
	if (!t || !p)
		return -ENOMEM;
	t->pid = ev->pid;
	tp_calls_thread_exec(s, t, ev->tid);
	t->in_sys = false; /* -S: no line for the execve, as the ptrace engine has it */
	rings_free(f, ev->pid);
	p->a = NULL;
	p->ahi = 0;
	p->to_main = false;
	r = tp_proc_auxv(ev->pid, AT_ENTRY, &entry);
	if (!r && tp_proc_read(ev->pid, entry, &p->orig, 1) != 1)
		r = -EIO;
	if (!r)
		r = tp_proc_poke_int3(ev->pid, entry, true, p->orig);
	if (!r)
		p->entry = entry;
	else
		tp_warn("process %d: cannot run it to its entry point: not traced", ev->pid);
	return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
}

/* The exec'd image at its entry point: hooked, or let go untraced when it cannot be (a
 * static program). */
static int at_entry(struct family *f, struct proc *p, pid_t tid)
{
	struct session *s = f->s;
	struct agent *a;
	struct thread *t;
	uint64_t base = 1, main_pc = 0;
	struct tp_symtab *st;
	int r;

	r = tp_proc_poke_int3(p->pid, p->entry, false, p->orig);
	if (!r)
		r = tp_proc_set_pc(tid, p->entry);
	p->entry = 0;
	if (r)
		return r;
	/* a static program (no interpreter) has no libc set up at its entry point: on to its
	 * main, where its own static dlopen can load the agent */
	if (!p->to_main && !tp_proc_auxv(p->pid, AT_BASE, &base) && !base &&
	    (st = tp_symtab_new())) {
		tp_symtab_load_pid(st, p->pid);
		if (tp_symtab_find_symbol(st, "main", &main_pc))
			main_pc = 0;
		tp_symtab_free(st);
		if (main_pc && tp_proc_read(p->pid, main_pc, &p->orig, 1) == 1 &&
		    !tp_proc_poke_int3(p->pid, main_pc, true, p->orig)) {
			p->entry = main_pc;
			p->to_main = true;
			return tp_proc_resume(s->p, tid, tp_calls_resume(s), 0);
		}
	}
	if (f->nag == AGENTS_MAX) {
		tp_warn("process %d: more than %d images with --engine agent -f: not traced",
			p->pid, AGENTS_MAX);
		return tp_proc_detach_tgid(s->p, p->pid);
	}
	a = tp_calls_agent_new(p->pid);
	if (!a)
		return -ENOMEM;
	a->launched = p->to_main; /* at its main already */
	p->to_main = false;
	r = tp_calls_agent_hook(s, a);
	tp_proc_resume_all_as(s->p, tp_calls_resume(s));
	t = thread_get(s, p->pid, tid);
	if (t && a->im) {
		t->img = a->im;
		tp_calls_event_exec(s, t);
	}
	if (a->ctl)
		f->ag[f->nag++] = a;
	else
		tp_calls_agent_free(a);
	if (r) {
		tp_warn("process %d: not traced", p->pid);
		return tp_proc_detach_tgid(s->p, p->pid);
	}
	p->a = a;
	return tp_proc_resume(s->p, tid, tp_calls_resume(s), 0);
}

static void on_exited(struct family *f, const struct tp_event *ev)
{
	struct session *s = f->s;
	struct thread *t;

	drain_all(f);
	if (ev->leader && ev->pid == tp_proc_pid(s->p))
		s->status = ev->status;
	t = tp_calls_thread_of(s, ev->tid);
	if (!t)
		return;
	/* any block's clock converts the stamps (a fork child writes into its parent's) */
	if (f->nag)
		tp_calls_agent_gone(s, f->ag[0], t);
	if (ev->leader) {
		tp_calls_event_exit(s, t, ev->status);
		proc_del(f, ev->pid);
	}
	tp_calls_thread_del(s, t);
}

/* Is @at a hooked entry of one of the family's blocks? */
static bool hook_site(const struct family *f, uint64_t at)
{
	for (int i = 0; i < f->nag; i++)
		for (uint32_t j = 0; j < f->ag[i]->n; j++)
			if (f->ag[i]->hfs[j].addr == at)
				return true;
	return false;
}

/* A fault of the agent's own guarded reads (a string argument's bytes, the stack it copies),
 * which it handles itself: not the program's signal, not shown. */
static bool agent_fault(struct family *f, const struct tp_event *ev)
{
	struct proc *p = proc_of(f, ev->pid);
	uint64_t pc;

	return (ev->sig == SIGSEGV || ev->sig == SIGBUS) && p && p->a &&
	       !tp_proc_get_pc(ev->tid, &pc) && tp_proc_agent_mapped(ev->pid, p->a->path, pc);
}

/* -S: a system call of the agent's own (a new thread's ring, a wait for a drain), which
 * the ptrace engine would not show. */
static bool agent_syscall(struct proc *p, pid_t tid)
{
	uint64_t pc;

	if (!p || !p->a || tp_proc_get_pc(tid, &pc))
		return false;
	if (!p->ahi && tp_proc_agent_text(p->pid, p->a->path, &p->alo, &p->ahi))
		p->ahi = 1; /* none: looked once */
	return pc >= p->alo && pc < p->ahi;
}

/* -S: the rt_sigreturn of the agent's handler of a hook's int3 (through libc's restorer
 * when the agent chains the program's SIGTRAP handler), entry and exit. */
static bool hook_sigreturn(struct thread *t, pid_t tid)
{
	struct tp_syscall_stop st;

	if (t->skip_sys) {
		t->skip_sys = false;
		return true;
	}
	if (!t->hook_trap || tp_proc_syscall_info(tid, &st) || !st.entry ||
	    st.nr != SYS_rt_sigreturn)
		return false;
	t->hook_trap = false;
	t->skip_sys = true;
	return true;
}

static int handle(struct family *f, const struct tp_event *ev)
{
	const struct tp_calls_opts *o = f->s->o;
	struct session *s = f->s;
	struct thread *t;
	struct proc *p;
	uint64_t pc;

	switch (ev->kind) {
	case TP_EV_FORK:
		return on_fork(f, ev);
	case TP_EV_CLONE:
		thread_get(s, ev->pid, ev->new_tid);
		tp_proc_resume(s->p, ev->new_tid, tp_calls_resume(s), 0);
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
	case TP_EV_EXEC:
		return on_exec(f, ev);
	case TP_EV_EXITED:
		on_exited(f, ev);
		return 0;
	case TP_EV_BREAKPOINT:
		p = proc_of(f, ev->pid);
		if (p && p->entry && !tp_proc_get_pc(ev->tid, &pc) && pc == p->entry + 1)
			return at_entry(f, p, ev->tid);
		/* the agent's own int3 (a pad that could not take 5 bytes, or one being placed),
		 * or the program's: shown, as the ptrace engine shows it */
		if (!tp_proc_get_pc(ev->tid, &pc) && !hook_site(f, pc - 1)) {
			drain_all(f);
			tp_calls_event_signal(s, thread_get(s, ev->pid, ev->tid), &ev->si);
		} else if (o->syscalls && (t = thread_get(s, ev->pid, ev->tid))) {
			t->hook_trap = true;
		}
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), SIGTRAP);
	case TP_EV_SYSCALL:
		t = thread_get(s, ev->pid, ev->tid);
		if (agent_syscall(proc_of(f, ev->pid), ev->tid) ||
		    (t && hook_sigreturn(t, ev->tid)))
			return tp_proc_resume(s->p, ev->tid, TP_RESUME_SYSCALL, 0);
		/* the calls before it, then its line (at its exit) */
		drain_all(f);
		return tp_calls_syscall_stop(s, ev);
	case TP_EV_SIGNAL:
		drain_all(f);
		/* a SIGTRAP here is a sent one (raise, kill: the agent's int3s are breakpoint
		 * stops), shown as the ptrace engine shows it */
		if (!agent_fault(f, ev))
			tp_calls_event_signal(s, thread_get(s, ev->pid, ev->tid), &ev->si);
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), ev->sig);
	default:
		return tp_proc_resume(s->p, ev->tid, tp_calls_resume(s), 0);
	}
}

/* Interrupted or out of time: the pads out of every process still hooked, then let go. */
static int leave_all(struct family *f)
{
	struct session *s = f->s;
	int r = tp_proc_stop_all(s->p, 0), e;

	drain_all(f);
	for (int i = 0; !r && i < f->npr; i++)
		if (f->pr[i].a && (e = tp_calls_agent_unhook(s, f->pr[i].a, f->pr[i].pid)))
			r = e;
	for (int i = 0; i < f->npr; i++)
		if (f->pr[i].entry)
			tp_proc_poke_int3(f->pr[i].pid, f->pr[i].entry, false, f->pr[i].orig);
	drain_all(f);
	tp_proc_detach(s->p);
	s->p = NULL;
	return r;
}

int tp_calls_agent_follow(struct session *s, struct agent *first)
{
	struct family *f = calloc(1, sizeof(*f));
	const struct tp_calls_opts *o = s->o;
	uint64_t deadline = 0;
	pid_t pid = first->pid;
	int r = 0, ret;

	if (!f)
		return 2;
	f->s = s;
	f->ag[f->nag++] = first;
	f->pr[f->npr++] = (struct proc){.pid = pid, .a = first};
	if (o->pid && o->duration > 0)
		deadline = tp_calls_now_ns() + (uint64_t)(o->duration * 1e9);
	tp_calls_tick(s->p, TICK_US);
	tp_proc_resume_all_as(s->p, tp_calls_resume(s));
	/* and the tasks that took the entry stop and the injected calls: with -p, the loader's
	 * task may be any thread (left stopped, it would make no call) */
	{
		pid_t tids[4096];
		int n = tp_proc_tasks_of(s->p, pid, tids, 4096);

		for (int i = 0; i < n && i < 4096; i++)
			if (!tp_proc_queued(s->p, tids[i]))
				tp_proc_resume(s->p, tids[i], tp_calls_resume(s), 0);
	}
	for (;;) {
		struct tp_event ev;

		drain_all(f);
		tp_calls_lines_tick(s, tp_calls_ticked);
		tp_calls_ticked = 0;
		if ((o->stop && *o->stop) || (deadline && tp_calls_now_ns() >= deadline))
			break;
		r = tp_proc_wait(s->p, &ev);
		if (r == -EINTR) {
			r = 0;
			continue;
		}
		if (r == -ECHILD || r == -EDEADLK) {
			r = 0;
			f->ended = true;
			break;
		}
		if (!r)
			r = handle(f, &ev);
		if (!r && s->err)
			r = s->err;
		if (r && r != -ESRCH)
			break;
		r = 0;
	}
	tp_calls_tick(s->p, 0);
	drain_all(f);
	if (r)
		tp_err("stopped tracing: %s", strerror(-r));
	if (!f->ended) {
		if (leave_all(f))
			r = r ? r : -EIO;
	} else {
		tp_proc_free(s->p);
		s->p = NULL;
	}
	for (int i = 0; i < s->nthreads; i++)
		s->threads[i]->n = 0;
	for (int i = 0; i < f->nag; i++) {
		tp_calls_agent_lost(f->ag[i]);
		if (f->ag[i] != first)
			tp_calls_agent_free(f->ag[i]);
	}
	if (r)
		ret = 1;
	else if (!s->launched)
		ret = 0;
	else if (!f->ended)
		ret = 128 + (o->stop && *o->stop ? *o->stop : 0);
	else
		ret = WIFSIGNALED(s->status) ? 128 + WTERMSIG(s->status) : WEXITSTATUS(s->status);
	free(f);
	return ret;
}
