/* The event loop: waiting for stops of traced tasks, decoding them into tp_events, restarting
 * tasks, and stopping them all.  The single-step engines call tp_proc_wait() and
 * tp_proc_resume() millions of times, so their common path is a waitpid(), one hash probe,
 * a PTRACE_GETSIGINFO and the restart, and nothing else. */
#include "proc/proc-priv.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { SILENT, REPORT };

/* ---- event queue ---- */

int tp_proc_queue_push(struct tp_proc *p, const struct tp_event *ev)
{
	struct tp_task *t;

	if (p->qlen == p->qcap) {
		unsigned ncap = p->qcap ? 2 * p->qcap : 16;
		struct tp_event *n = malloc(ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (unsigned i = 0; i < p->qlen; i++)
			n[i] = p->queue[(p->qhead + i) % p->qcap];
		free(p->queue);
		p->queue = n;
		p->qcap = ncap;
		p->qhead = 0;
	}
	p->queue[(p->qhead + p->qlen) % p->qcap] = *ev;
	p->qlen++;
	/* Its stop is the caller's to end now: tp_proc_resume_all() must not restart it
	 * behind the event's back (the event would then describe a stop that is over). */
	t = tp_proc_task_find(p, ev->tid);
	if (t && ev->kind != TP_EV_EXITED)
		t->held = false;
	return 0;
}

bool tp_proc_queued(struct tp_proc *p, pid_t tid)
{
	for (unsigned i = 0; i < p->qlen; i++)
		if (p->queue[(p->qhead + i) % p->qcap].tid == tid)
			return true;
	return false;
}

int tp_proc_requeue(struct tp_proc *p, const struct tp_event *ev)
{
	return tp_proc_queue_push(p, ev);
}

static void queue_pop(struct tp_proc *p, struct tp_event *ev)
{
	*ev = p->queue[p->qhead];
	p->qhead = (p->qhead + 1) % p->qcap;
	p->qlen--;
}

/* ---- early stops of tasks not announced yet ---- */

static int early_add(struct tp_proc *p, pid_t tid, int status)
{
	if (p->nearly == p->early_cap) {
		int ncap = p->early_cap ? 2 * p->early_cap : 4;
		struct tp_early *n = realloc(p->early, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		p->early = n;
		p->early_cap = ncap;
	}
	p->early[p->nearly].tid = tid;
	p->early[p->nearly].status = status;
	p->nearly++;
	return 0;
}

static bool early_take(struct tp_proc *p, pid_t tid, int *status)
{
	for (int i = 0; i < p->nearly; i++)
		if (p->early[i].tid == tid) {
			*status = p->early[i].status;
			p->early[i] = p->early[--p->nearly];
			return true;
		}
	return false;
}

/* ---- restarting ---- */

int tp_proc_interrupt(struct tp_proc *p, struct tp_task *t)
{
	/* ESRCH: the task is dying; its exit report will come, nothing to wait for. */
	if (ptrace(PTRACE_INTERRUPT, t->tid, 0, 0))
		return -errno;
	t->interrupting = true;
	p->ninterrupting++;
	return 0;
}

int tp_proc_restart(struct tp_proc *p, struct tp_task *t, enum tp_resume how, int sig)
{
	int req;

	if (t->group_stop) {
		/* Leave it stopped, as its process is, but learn when SIGCONT ends the stop. */
		if (!ptrace(PTRACE_LISTEN, t->tid, 0, 0))
			goto done;
		if (errno == ESRCH)
			goto done;
		t->group_stop = false;
	}
	req = how == TP_RESUME_STEP	 ? PTRACE_SINGLESTEP
	      : how == TP_RESUME_SYSCALL ? PTRACE_SYSCALL
					 : PTRACE_CONT;
	/* ESRCH on a task we know to be stopped means it was killed meanwhile: its exit will be
	 * reported, so it counts as running. */
	if (ptrace(req, t->tid, 0, sig) && errno != ESRCH)
		return -errno;
done:
	t->how = how;
	t->held = false;
	t->pending_sig = 0;
	tp_proc_task_set_state(p, t, TP_TASK_RUNNING);
	p->last = t;
	return 0;
}

int tp_proc_resume(struct tp_proc *p, pid_t tid, enum tp_resume how, int sig)
{
	struct tp_task *t = tp_proc_task_find(p, tid);

	if (!t)
		return -ESRCH;
	if (t->state != TP_TASK_STOPPED)
		return -EBUSY;
	return tp_proc_restart(p, t, how, sig);
}

int tp_proc_resume_all(struct tp_proc *p)
{
	return tp_proc_resume_all_as(p, (enum tp_resume) - 1);
}

int tp_proc_resume_all_as(struct tp_proc *p, enum tp_resume how)
{
	int r = 0;

	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];

		if (t && t->held && t->state == TP_TASK_STOPPED) {
			int e = tp_proc_restart(p, t, (int)how < 0 ? t->how : how, 0);

			if (e && !r)
				r = e;
		}
	}
	return r;
}

/* ---- waiting ---- */

static bool traced_by_us(pid_t tid)
{
	char path[64], line[128];
	long tracer = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "TracerPid:", 10)) {
			tracer = strtol(line + 10, NULL, 10);
			break;
		}
	fclose(f);
	return tracer == gettid();
}

/* An exec by a non-leader thread reports under the leader's tid: move the execing task's
 * entry there if the leader was not known (e.g. a zombie leader when we attached). */
static void exec_rekey(struct tp_proc *p, pid_t tid)
{
	unsigned long former = 0;
	struct tp_task *f, *t;

	if (ptrace(PTRACE_GETEVENTMSG, tid, 0, &former) || (pid_t)former == tid)
		return;
	f = tp_proc_task_find(p, (pid_t)former);
	if (!f)
		return;
	t = tp_proc_task_add(p, tid, f->tgid);
	if (!t)
		return;
	t->how = f->how;
	tp_proc_task_set_state(p, t, TP_TASK_RUNNING);
}

/* When something that is not ours is first in line for waitid(P_ALL), poll our tasks one by
 * one instead, so that the other child is never reaped.  Stopped tasks are polled too: a
 * SIGKILL or an exec may have killed them. */
static int poll_ours(struct tp_proc *p, pid_t *tidp, int *stp)
{
	struct timespec ts = {0, 1000000};

	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];
		pid_t r;

		if (!t)
			continue;
		r = waitpid(t->tid, stp, __WALL | __WNOTHREAD | WNOHANG);
		if (r > 0) {
			*tidp = r;
			return 0;
		}
	}
	if (!p->nrunning)
		return -EDEADLK;
	if (nanosleep(&ts, NULL))
		return -errno;
	return 1;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Poll for @tid's next stop for a short while before sleeping in waitpid(): a tracer that
 * sleeps is woken by an interrupt from the tracee's CPU, which costs more than the stop
 * itself on these VMs when the stops come every few microseconds. */
static bool spin_wait(struct tp_proc *p, pid_t tid, pid_t *tidp, int *stp)
{
	uint64_t end = mono_ns() + p->spin_ns;

	do {
		pid_t got = waitpid(tid, stp, __WALL | __WNOTHREAD | WNOHANG);

		if (got > 0) {
			*tidp = got;
			return true;
		}
		if (got < 0)
			return false;
	} while (mono_ns() < end);
	return false;
}

void tp_proc_set_trap_filter(struct tp_proc *p, tp_proc_trap_filter_fn fn, void *arg)
{
	p->trap_filter = fn;
	p->trap_arg = arg;
}

void tp_proc_set_spin(struct tp_proc *p, unsigned us)
{
	p->spin_ns = (uint64_t)us * 1000;
}

void tp_proc_set_wait_signal(struct tp_proc *p, int sig)
{
	p->wait_sig = sig;
}

/* Around a wait that may sleep: let the wait signal in, then shut it out again. */
static void wait_sig_gate(struct tp_proc *p, int how)
{
	sigset_t set;

	if (!p->wait_sig)
		return;
	sigemptyset(&set);
	sigaddset(&set, p->wait_sig);
	pthread_sigmask(how, &set, NULL);
}

/* The next wait status of one of our tasks. */
static int next_status(struct tp_proc *p, pid_t *tidp, int *stp)
{
	struct tp_task *last = p->last;
	siginfo_t si;
	pid_t tid;
	int r;

	/* The stepping engines' case, one waitpid() for the only running task.  Not for a
	 * leader with other threads: killed threads that we hold stopped delay its exit report
	 * until they are reaped, so waitpid(leader) would never return. */
	if (p->nrunning == 1 && last && last->state == TP_TASK_RUNNING &&
	    (p->ntasks == 1 || last->tid != last->tgid)) {
		if (p->spin_ns && spin_wait(p, last->tid, tidp, stp))
			return 0;
		wait_sig_gate(p, SIG_UNBLOCK);
		tid = waitpid(last->tid, stp, __WALL | __WNOTHREAD);
		wait_sig_gate(p, SIG_BLOCK);
		if (tid > 0) {
			*tidp = tid;
			return 0;
		}
		if (errno != ECHILD)
			return -errno;
		/* Its tid changed under an exec by a non-leader thread: look at everyone. */
	}
	for (;;) {
		/* Peek first: another child of this thread must not be reaped by mistake.  With
		 * nothing running, only the deaths of stopped tasks can come, and they are there
		 * already or never. */
		si.si_pid = 0;
		if (p->nrunning)
			wait_sig_gate(p, SIG_UNBLOCK);
		r = waitid(P_ALL, 0, &si,
			   WEXITED | WSTOPPED | __WALL | __WNOTHREAD | WNOWAIT |
			       (p->nrunning ? 0 : WNOHANG));
		if (p->nrunning)
			wait_sig_gate(p, SIG_BLOCK);
		if (r)
			return -errno;
		tid = si.si_pid;
		if (!tid)
			return -EDEADLK;
		if (!tp_proc_task_find(p, tid) && si.si_code == CLD_TRAPPED &&
		    (si.si_status >> 8) == PTRACE_EVENT_EXEC)
			exec_rekey(p, tid);
		if (!tp_proc_task_find(p, tid)) {
			if (tid == p->unrelated ||
			    (si.si_code != CLD_TRAPPED && !traced_by_us(tid))) {
				p->unrelated = tid;
				r = poll_ours(p, tidp, stp);
				if (r <= 0)
					return r;
				continue;
			}
			/* A new task whose creator's clone/fork event we have not seen yet. */
			if (waitpid(tid, stp, __WALL | __WNOTHREAD) != tid)
				return -errno;
			if (early_add(p, tid, *stp))
				return -ENOMEM;
			continue;
		}
		if (waitpid(tid, stp, __WALL | __WNOTHREAD) != tid)
			return -errno;
		*tidp = tid;
		return 0;
	}
}

/* ---- decoding ---- */

static int exited(struct tp_proc *p, struct tp_task *t, int st, struct tp_event *ev)
{
	ev->kind = TP_EV_EXITED;
	ev->status = st;
	ev->leader = t->tid == t->tgid;
	if (ev->leader) {
		if (t->tgid == p->pid) {
			p->exit_status = st;
			p->exited = true;
		}
		tp_proc_tgid_del(p, t->tgid);
	}
	tp_proc_task_del(p, t);
	return REPORT;
}

/* A stop the caller is not to see: the task goes on as it was asked to, unless we were busy
 * stopping it, in which case this stop will do. */
static int quiet(struct tp_proc *p, struct tp_task *t, bool interrupted)
{
	if (interrupted)
		t->held = true;
	else
		tp_proc_restart(p, t, t->how, 0);
	return SILENT;
}

static bool stop_signal(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

static bool is_thread_of(pid_t tgid, pid_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)tgid, (int)tid);
	return access(path, F_OK) == 0;
}

static int new_task(struct tp_proc *p, struct tp_task *t, int event, struct tp_event *ev,
		    bool queue)
{
	unsigned long msg = 0;
	bool thread, follow;
	pid_t nt;
	int cst;

	if (ptrace(PTRACE_GETEVENTMSG, t->tid, 0, &msg) || !msg)
		return quiet(p, t, false);
	nt = (pid_t)msg;
	thread = event == PTRACE_EVENT_CLONE && is_thread_of(t->tgid, nt);
	follow = thread || (p->opts & TP_PROC_FOLLOW_FORK);
	ev->kind = thread ? TP_EV_CLONE : TP_EV_FORK;
	ev->new_tid = nt;
	ev->vm_shared = !thread && event != PTRACE_EVENT_FORK;

	/* The child is auto-attached and stops at once (PTRACE_EVENT_STOP): take that stop now
	 * so that the caller can resume both tasks as soon as it sees this event. */
	if (!early_take(p, nt, &cst)) {
		while (waitpid(nt, &cst, __WALL | __WNOTHREAD) != nt) {
			if (errno != EINTR) {
				cst = SIGKILL;
				break;
			}
		}
	}
	if (WIFEXITED(cst) || WIFSIGNALED(cst)) {
		struct tp_event dead = {.kind = TP_EV_EXITED,
					.tid = nt,
					.pid = thread ? t->tgid : nt,
					.status = cst,
					.leader = !thread};

		if (!follow)
			return REPORT;
		if (queue) {
			tp_proc_queue_push(p, ev);
			tp_proc_queue_push(p, &dead);
			return SILENT;
		}
		tp_proc_queue_push(p, &dead);
		return REPORT;
	}
	if (!follow) {
		ptrace(PTRACE_DETACH, nt, 0, 0);
		return REPORT;
	}
	if (!tp_proc_task_add(p, nt, thread ? t->tgid : nt)) {
		ptrace(PTRACE_DETACH, nt, 0, 0);
		return REPORT;
	}
	if (!thread)
		tp_proc_tgid_add(p, nt);
	return REPORT;
}

static int exec_done(struct tp_proc *p, struct tp_task *t, struct tp_event *ev, bool interrupted)
{
	unsigned long former = t->tid;

	ptrace(PTRACE_GETEVENTMSG, t->tid, 0, &former);
	if ((pid_t)former != t->tid) {
		/* ptrace(2) "execve(2) under ptrace": the execing thread now has the leader's
		 * tid and its own tid is gone without an exit report. */
		struct tp_task *f = tp_proc_task_find(p, (pid_t)former);

		if (f) {
			t->how = f->how;
			interrupted |= f->interrupting;
			tp_proc_task_del(p, f);
		}
	}
	t->group_stop = false;
	tp_proc_memfd_drop(t->tgid);
	ev->old_tid = (pid_t)former;
	if (!(p->opts & TP_PROC_TRACE_EXEC))
		return quiet(p, t, interrupted);
	ev->kind = TP_EV_EXEC;
	return REPORT;
}

static int decode(struct tp_proc *p, pid_t tid, int st, struct tp_event *ev, bool queue)
{
	struct tp_task *t = tp_proc_task_find(p, tid);
	bool interrupted;
	unsigned long msg;
	int sig;

	if (!t)
		return SILENT;
	memset(ev, 0, offsetof(struct tp_event, si));
	ev->leader = false;
	ev->old_tid = 0;
	ev->tid = tid;
	ev->pid = t->tgid;
	if (WIFEXITED(st) || WIFSIGNALED(st))
		return exited(p, t, st, ev);
	if (!WIFSTOPPED(st))
		return SILENT;
	tp_proc_task_set_state(p, t, TP_TASK_STOPPED);
	interrupted = t->interrupting;
	if (interrupted) {
		t->interrupting = false;
		p->ninterrupting--;
	}
	sig = WSTOPSIG(st);
	switch (st >> 16) {
	case 0:
		break;
	case PTRACE_EVENT_STOP:
		if (stop_signal(sig)) {
			t->group_stop = true;
			if (interrupted) {
				t->held = true;
				return SILENT;
			}
			ev->kind = TP_EV_GROUP_STOP;
			ev->sig = sig;
			return REPORT;
		}
		/* Our PTRACE_INTERRUPT, the end of a group-stop we listened to (SIGCONT), or an
		 * interrupt that arrived when the task was already stopped. */
		t->group_stop = false;
		return quiet(p, t, interrupted);
	case PTRACE_EVENT_CLONE:
	case PTRACE_EVENT_FORK:
	case PTRACE_EVENT_VFORK:
		return new_task(p, t, st >> 16, ev, queue);
	case PTRACE_EVENT_EXEC:
		return exec_done(p, t, ev, interrupted);
	case PTRACE_EVENT_EXIT:
		t->exiting = true;
		msg = 0;
		ptrace(PTRACE_GETEVENTMSG, tid, 0, &msg);
		ev->kind = TP_EV_EXIT;
		ev->status = (int)msg;
		return REPORT;
	default:
		return quiet(p, t, interrupted);
	}
	if (sig == (SIGTRAP | 0x80)) {
		ev->kind = TP_EV_SYSCALL;
		return REPORT;
	}
	/* The caller knows its int3s by address: then the registers, which it needs anyway,
	 * tell a breakpoint without a GETSIGINFO. */
	if (sig == SIGTRAP && t->how != TP_RESUME_STEP && p->trap_filter &&
	    !ptrace(PTRACE_GETREGS, tid, 0, &ev->regs) &&
	    p->trap_filter(p->trap_arg, t->tgid, &ev->regs)) {
		ev->has_regs = true;
		ev->kind = TP_EV_BREAKPOINT;
		memset(&ev->si, 0, sizeof(ev->si));
		ev->si.si_signo = SIGTRAP;
		ev->si.si_code = SI_KERNEL;
		return REPORT;
	}
	if (ptrace(PTRACE_GETSIGINFO, tid, 0, &ev->si)) {
		/* Killed while stopped: the exit report follows. */
		tp_proc_task_set_state(p, t, TP_TASK_RUNNING);
		return SILENT;
	}
	if (sig == SIGTRAP && ev->si.si_code == SI_KERNEL) {
		ev->kind = TP_EV_BREAKPOINT;
	} else if (sig == SIGTRAP && t->how == TP_RESUME_STEP &&
		   (ev->si.si_code == TRAP_TRACE || ev->si.si_code == TRAP_BRKPT)) {
		/* TRAP_BRKPT: x86 reports a step over a syscall instruction that way. */
		ev->kind = TP_EV_STEP;
	} else {
		ev->kind = TP_EV_SIGNAL;
		ev->sig = sig;
		t->pending_sig = sig;
	}
	return REPORT;
}

int tp_proc_wait(struct tp_proc *p, struct tp_event *ev)
{
	pid_t tid;
	int st, r;

	if (tp_proc_guard_crash_after && !--tp_proc_guard_crash_after)
		tp_proc_guard_test_crash();
	for (;;) {
		if (p->qlen) {
			queue_pop(p, ev);
			return 0;
		}
		if (!p->ntasks)
			return -ECHILD;
		r = next_status(p, &tid, &st);
		if (r)
			return r;
		if (decode(p, tid, st, ev, false) == REPORT)
			return 0;
	}
}

int tp_proc_wait_queue(struct tp_proc *p)
{
	struct tp_event ev;
	pid_t tid;
	int st, r;

	if (!p->ntasks)
		return -ECHILD;
	r = next_status(p, &tid, &st);
	if (r)
		return r;
	if (decode(p, tid, st, &ev, true) == REPORT)
		return tp_proc_queue_push(p, &ev);
	return 0;
}

int tp_proc_stop_all(struct tp_proc *p, pid_t except)
{
	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];

		if (!t || t->tid == except || t->state != TP_TASK_RUNNING || t->interrupting)
			continue;
		/* A leader gone with pthread_exit() would never report the stop. */
		if (t->tid == t->tgid && p->ntasks > 1 && tp_proc_is_zombie(t->tid))
			continue;
		tp_proc_interrupt(p, t);
	}
	while (p->ninterrupting) {
		int r = tp_proc_wait_queue(p);

		if (r && r != -EINTR)
			return r;
	}
	return 0;
}

/* Queued stops of signal deliveries (no event loop is running to take them): each task
 * given its signal and let go. */
static int deliver_queued(struct tp_proc *p)
{
	unsigned n = p->qlen;
	int r;

	for (unsigned i = 0; i < n; i++) {
		struct tp_event ev;
		struct tp_task *t;

		queue_pop(p, &ev);
		t = tp_proc_task_find(p, ev.tid);
		if (ev.kind == TP_EV_SIGNAL && t && t->state == TP_TASK_STOPPED) {
			r = tp_proc_restart(p, t, t->how, ev.sig);
			if (r)
				return r;
			continue;
		}
		r = tp_proc_queue_push(p, &ev);
		if (r)
			return r;
	}
	return 0;
}

static uint64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

int tp_proc_let_run(struct tp_proc *p, unsigned us)
{
	uint64_t end = mono_us() + us;
	int r = deliver_queued(p);

	if (!r)
		r = tp_proc_resume_all(p);
	/* a signal's delivery stops its task until the tracer answers: answered at once, or a
	 * program with a fast timer would never run a line of its own between the stops */
	while (!r && mono_us() < end) {
		siginfo_t si = {.si_pid = 0};
		struct tp_task *t;

		if (waitid(P_ALL, 0, &si,
			   WEXITED | WSTOPPED | __WALL | __WNOTHREAD | WNOWAIT | WNOHANG) ||
		    !si.si_pid || !(t = tp_proc_task_find(p, si.si_pid)) ||
		    t->state != TP_TASK_RUNNING) {
			usleep(50);
			continue;
		}
		r = tp_proc_wait_queue(p);
		if (r == -EINTR)
			r = 0;
		if (!r)
			r = deliver_queued(p);
	}
	return r ? r : tp_proc_stop_all(p, 0);
}
