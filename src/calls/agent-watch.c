/* `tracepad calls --engine agent` with plugins: tracepad stays attached to the program, which
 * stops only for its signals, its threads' births and ends and libc's _exit, so that plugins
 * see threads and the process end with every thread stopped and its memory intact (memory's
 * leak check reads the registers and the memory of a process at its exit), and the exit calls
 * they asked for (__libc_freeres) run before _exit.  The calls themselves come from the
 * rings, drained between the stops and before each of them. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "base/log.h"
#include "calls/agent-priv.h"
#include "elf/file.h"
#include "plugins/plugins.h"

#define WATCH_TICK_US 250 /* the rings are drained at least this often (as NAP_US) */

struct exit_bp {
	uint64_t at; /* libc's _exit, 0: no exit calls */
	uint8_t orig;
	pid_t vfork; /* a vfork child that ran _exit on the parent's memory: the int3 is out */
};

/* An int3 at libc's _exit for the plugins' exit calls, unless the agent hooks it. */
static void exit_plant(struct session *s, struct agent *a, struct image *im, struct exit_bp *x)
{
	uint64_t at = 0;

	if (!s->nexit_calls || !im || !im->libc ||
	    tp_elf_lookup(im->libc->path, "_exit", &at, NULL))
		return;
	at += im->libc->bias;
	for (uint32_t j = 0; j < a->n; j++)
		if (a->hfs[j].addr == at) {
			tp_warn("--engine agent: _exit is traced: the plugins' exit calls are not "
				"made");
			return;
		}
	if (tp_proc_read(a->pid, at, &x->orig, 1) != 1 ||
	    tp_proc_poke_int3(a->pid, at, true, x->orig))
		return;
	x->at = at;
}

static void exit_remove(struct agent *a, struct exit_bp *x)
{
	if (x->at)
		tp_proc_poke_int3(a->pid, x->at, false, x->orig);
	x->at = 0;
}

/* A thread is about to end, stopped: its calls in flight never return, plugins see it go,
 * and the process end once every thread of it is ending. */
static void thread_end(struct session *s, struct agent *a, pid_t tid)
{
	struct thread *t = tp_calls_agent_thread(s, a->pid, tid);
	pid_t tids[256];
	int n;
	bool all = true;

	tp_calls_agent_drain(s, a);
	if (!t)
		return;
	t->exiting = true;
	tp_calls_agent_thread_over(s, a, t, " = <no return>");
	tp_plugins_thread(s->plugins, a->pid, tid, TRACEPAD_THREAD_EXIT);
	n = tp_proc_tasks_of(s->p, a->pid, tids, 256);
	for (int i = 0; i < n && i < 256; i++) {
		struct thread *o = tp_calls_thread_of(s, tids[i]);

		if (!o || !o->exiting)
			all = false;
	}
	if (all && !t->img->exit_reported) {
		t->img->exit_reported = true;
		s->cur = t;
		tp_plugins_process(s->plugins, a->pid, TRACEPAD_PROC_EXIT);
		s->cur = NULL;
	}
}

/* Events of children (followed only to be let go): a fork child gets the program's byte at
 * _exit back and goes; a vfork child, on the parent's memory, is let go at its exec, and its
 * own _exit takes the int3 out until it is gone. */
static int on_child(struct session *s, struct agent *a, struct exit_bp *x,
		    const struct tp_event *ev)
{
	struct user_regs_struct regs;

	switch (ev->kind) {
	case TP_EV_EXEC:
		if (x->vfork == ev->pid && !tp_proc_poke_int3(a->pid, x->at, true, x->orig))
			x->vfork = 0;
		return tp_proc_detach_tgid(s->p, ev->pid);
	case TP_EV_BREAKPOINT:
		if (x->at && !tp_proc_get_regs(ev->tid, &regs) && regs.rip == x->at + 1) {
			tp_proc_poke_int3(a->pid, x->at, false, x->orig);
			x->vfork = ev->pid;
			tp_proc_set_pc(ev->tid, x->at);
			return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
		}
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, SIGTRAP);
	case TP_EV_SIGNAL:
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, ev->sig);
	case TP_EV_EXITED:
		if (x->vfork == ev->pid && !tp_proc_poke_int3(a->pid, x->at, true, x->orig))
			x->vfork = 0;
		return 0;
	default:
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	}
}

/* After the hooks went in: the threads tracepad held, then every thread of @pid (the one that
 * took the entry stop and the injected calls). */
static int resume_hooked(struct session *s, pid_t pid)
{
	pid_t tids[4096];
	int r = tp_proc_resume_all(s->p), n = tp_proc_tasks_of(s->p, pid, tids, 4096);

	for (int i = 0; !r && i < n && i < 4096; i++)
		if (tp_proc_resume(s->p, tids[i], TP_RESUME_CONT, 0) == -ESRCH)
			r = -ESRCH;
	return r;
}

/* An execve: the old image's calls in flight end untraced, its hooks, block and agent gone
 * with it; plugins see a new process, as with the ptrace engine.  The new image runs to where
 * a launched program is hooked (a static one on to its main) and is hooked anew; one that
 * cannot be runs on untraced.  -ECHILD: the process ended on the way. */
static int on_exec(struct session *s, struct agent *a, struct exit_bp *x, const struct tp_event *ev)
{
	struct thread *t;
	int r;

	tp_calls_agent_drain(s, a);
	t = tp_calls_thread_of(s, ev->old_tid ? ev->old_tid : ev->tid);
	if (t) {
		t->pid = ev->pid;
		tp_calls_thread_exec(s, t, ev->tid);
	}
	tp_calls_agent_clear(a);
	*x = (struct exit_bp){0};
	tp_plugins_process(s->plugins, a->pid, TRACEPAD_PROC_START);
	a->launched = true;
	r = tp_calls_agent_to_entry(s, a->pid);
	if (r == -ESRCH)
		return -ECHILD;
	if (!r)
		r = tp_calls_agent_hook(s, a);
	if (r == -ESRCH)
		return -ECHILD;
	t = tp_calls_agent_thread(s, a->pid, ev->tid);
	if (r) {
		tp_warn("process %d: its new image cannot be hooked: not traced", a->pid);
		tp_calls_agent_clear(a);
	} else {
		if (t)
			t->img = a->im;
		exit_plant(s, a, a->im, x);
	}
	if (t)
		tp_calls_event_exec(s, t);
	return resume_hooked(s, a->pid);
}

static int on_event(struct session *s, struct agent *a, struct exit_bp *x,
		    const struct tp_event *ev)
{
	struct user_regs_struct regs;
	struct thread *t;
	int r;

	if (ev->pid != a->pid)
		return on_child(s, a, x, ev);
	switch (ev->kind) {
	case TP_EV_EXEC:
		return on_exec(s, a, x, ev);
	case TP_EV_FORK:
		/* children are not traced (no -f): a fork child gets its byte back and goes */
		if (!ev->vm_shared) {
			if (x->at)
				tp_proc_poke_int3(ev->new_tid, x->at, false, x->orig);
			tp_proc_detach_tgid(s->p, ev->new_tid);
		} else {
			tp_proc_resume(s->p, ev->new_tid, TP_RESUME_CONT, 0);
		}
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	case TP_EV_BREAKPOINT:
		if (x->at && !tp_proc_get_regs(ev->tid, &regs) && regs.rip == x->at + 1 &&
		    (t = tp_calls_agent_thread(s, a->pid, ev->tid))) {
			/* _exit: the next exit call, or _exit as it was entered, run from the
			 * program's own bytes */
			tp_calls_agent_drain(s, a);
			t->img = t->img ? t->img : tp_calls_image_of(s, a->pid);
			r = t->img ? tp_calls_exit_detour(s, t->img, t, &regs) : 0;
			if (r)
				return r < 0 ? r : 0;
			exit_remove(a, x);
			tp_proc_set_pc(ev->tid, regs.rip - 1);
			return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
		}
		/* the agent's int3 hooks and the program's own traps: theirs */
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, SIGTRAP);
	case TP_EV_SIGNAL:
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, ev->sig);
	case TP_EV_CLONE:
		t = tp_calls_agent_thread(s, a->pid, ev->tid);
		if (t && !tp_calls_thread_of(s, ev->new_tid) &&
		    tp_calls_thread_add(s, ev->new_tid, a->pid, t->img, true))
			tp_plugins_thread(s->plugins, a->pid, ev->new_tid, TRACEPAD_THREAD_START);
		tp_proc_resume(s->p, ev->new_tid, TP_RESUME_CONT, 0);
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	case TP_EV_EXIT:
		thread_end(s, a, ev->tid);
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	case TP_EV_EXITED:
		return 0;
	default:
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	}
}

int tp_calls_agent_watch(struct session *s, struct agent *a, bool *ended, int *st)
{
	struct image *im = tp_calls_image_of(s, a->pid);
	struct exit_bp x = {0};
	pid_t tids[4096];
	uint64_t deadline = 0, next = 0;
	int n, r = 0;

	n = tp_proc_tasks(s->p, tids, 4096);
	for (int i = 0; i < n && i < 4096; i++)
		if (!tp_calls_agent_thread(s, a->pid, tids[i]))
			return -ENOMEM;
	for (int i = 0; i < n && i < 4096; i++) {
		struct thread *t = tp_calls_thread_of(s, tids[i]);

		if (t && !t->img)
			t->img = im;
	}
	tp_plugins_process(s->plugins, a->pid, TRACEPAD_PROC_START);
	for (int i = 0; i < n && i < 4096; i++)
		tp_plugins_thread(s->plugins, a->pid, tids[i], TRACEPAD_THREAD_START);
	exit_plant(s, a, im, &x);
	if (s->o->pid && s->o->duration > 0)
		deadline = tp_calls_now_ns() + (uint64_t)(s->o->duration * 1e9);
	r = resume_hooked(s, a->pid);
	tp_calls_tick(s->p, WATCH_TICK_US);
	while (!r && !(s->o->stop && *s->o->stop) && !(deadline && tp_calls_now_ns() >= deadline)) {
		struct tp_event ev;
		siginfo_t si = {0};

		/* while the rings fill, drain them until a thread stops (the program would
		 * otherwise wait for room until the next tick); a ring less full waits for the
		 * tick: a pass a few records long costs more than its records (agent.c) */
		if (tp_calls_agent_drain(s, a) && a->full &&
		    !waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | __WALL | WNOHANG | WNOWAIT) &&
		    !si.si_pid) {
			if (tp_calls_ticked) {
				tp_calls_lines_tick(s, true);
				tp_calls_ticked = 0;
			}
			continue;
		}
		if (tp_calls_now_ns() >= next) {
			tp_calls_agent_ended(s, a, false);
			next = tp_calls_now_ns() + 50000000u;
		}
		tp_calls_lines_tick(s, tp_calls_ticked);
		tp_calls_ticked = 0;
		r = tp_proc_wait(s->p, &ev);
		if (r == -EINTR) {
			r = 0;
			continue;
		}
		if (r == -ECHILD) {
			r = 0;
			*ended = true;
			break;
		}
		if (r)
			break;
		if (ev.kind == TP_EV_EXITED && ev.leader && ev.pid == a->pid) {
			*st = ev.status;
			*ended = true;
			break;
		}
		r = on_event(s, a, &x, &ev);
		if (r == -ESRCH)
			r = 0;
		if (r == -ECHILD) { /* an exec'd image that ended before its hooks */
			*st = s->status;
			*ended = true;
			r = 0;
			break;
		}
	}
	tp_calls_tick(s->p, 0);
	tp_calls_agent_drain(s, a);
	if (r)
		tp_err("stopped tracing: %s", strerror(-r));
	if (*ended) {
		tp_proc_free(s->p);
		s->p = NULL;
		return r ? 1 : 0;
	}
	/* tracepad leaves a program that runs on: plugins see it as it is, every thread
	 * stopped, then the hooks go */
	if (!tp_proc_stop_all(s->p, 0)) {
		exit_remove(a, &x);
		tp_calls_agent_drain(s, a);
		tp_plugins_process(s->plugins, a->pid, TRACEPAD_PROC_DETACH);
	}
	return tp_calls_agent_leave(s, a) || r ? 1 : 0;
}
