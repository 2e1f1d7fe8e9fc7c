/* Code run inside a stopped tracee for the tracer: syscalls (mmap of breakpoint areas,
 * rt_sigaction), calls of pure functions (IFUNC resolvers), single-steps out of a slot.  Each
 * waits for its one task; what other tasks report meanwhile is held, then requeued. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arch/arch.h"
#include "base/log.h"
#include "proc/inject.h"
#include "proc/proc-priv.h"

/* Signals of a step held back at most this often before the step is given up. */
#define STEP_SIGNALS_MAX 16
/* Syscall stops of another syscall passed over before an injection is given up. */
#define OTHER_SYSCALLS_MAX 2
/* The red zone below the stack pointer, and more, that an injected call keeps clear of. */
#define CALL_STACK_GAP 1024

int tp_proc_inject_defer(struct tp_proc *p, const struct tp_event *ev)
{
	if (p->hlen == p->hcap) {
		unsigned ncap = p->hcap ? 2 * p->hcap : 16;
		struct tp_event *n = malloc(ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (unsigned i = 0; i < p->hlen; i++)
			n[i] = p->held[(p->hhead + i) % p->hcap];
		free(p->held);
		p->held = n;
		p->hcap = ncap;
		p->hhead = 0;
	}
	p->held[(p->hhead + p->hlen) % p->hcap] = *ev;
	p->hlen++;
	return 0;
}

/* Hand the events deferred during one operation back to the event loop, in order. */
void tp_proc_inject_flush(struct tp_proc *p)
{
	while (p->hlen) {
		tp_proc_requeue(p, &p->held[p->hhead]);
		p->hhead = (p->hhead + 1) % p->hcap;
		p->hlen--;
	}
}

/* The operations of this module finish before the caller sees its own signals. */
int tp_proc_inject_wait(struct tp_proc *p, struct tp_event *ev)
{
	int r;

	while ((r = tp_proc_wait(p, ev)) == -EINTR)
		;
	return r;
}

int tp_proc_inject_wait_task(struct tp_proc *p, pid_t tid, struct tp_event *ev)
{
	int r;

	while (!(r = tp_proc_inject_wait(p, ev)) && ev->tid != tid)
		if ((r = tp_proc_inject_defer(p, ev)))
			return r;
	if (!r && (ev->kind == TP_EV_EXIT || ev->kind == TP_EV_EXITED)) {
		tp_proc_inject_defer(p, ev);
		r = -ESRCH;
	}
	return r;
}

/* After a signal stop of @tid, held back by an operation of this module: resume it as the
 * operation does.  The stop may be one reported before the operation resumed @tid (a
 * signal that came as tracepad attached, queued since): @tid then runs already, and goes on
 * to the stop the operation waits for. */
static int resume_unless_running(struct tp_proc *p, pid_t tid, enum tp_resume how)
{
	int r = tp_proc_resume(p, tid, how, 0);

	return r == -EBUSY ? 0 : r;
}

/* A task in a group-stop (its process stopped by SIGSTOP) is run for the operation all the
 * same: waiting for a SIGCONT could take for ever.  Returns whether it was group-stopped. */
static bool unstop(struct tp_proc *p, pid_t tid)
{
	struct tp_task *t = tp_proc_task_find(p, tid);

	if (!t || !t->group_stop)
		return false;
	t->group_stop = false;
	return true;
}

/* ...and put back in its group-stop after: interrupted, then resumed, it traps before it runs
 * an instruction of its own (the group being stopped, the trap is a group-stop again).  Its
 * process stays stopped as it was, and detaching leaves it so. */
static void restop(struct tp_proc *p, pid_t tid)
{
	struct tp_task *t = tp_proc_task_find(p, tid);

	if (!t || t->state != TP_TASK_STOPPED || tp_proc_interrupt(p, t))
		return;
	t->group_stop = false; /* resumed for real: PTRACE_LISTEN would hide the trap */
	if (tp_proc_restart(p, t, TP_RESUME_CONT, 0))
		return;
	while ((t = tp_proc_task_find(p, tid)) && t->interrupting) {
		int r = tp_proc_wait_queue(p);

		if (r && r != -EINTR)
			break;
	}
}

static int step_once(struct tp_proc *p, pid_t tid, uint64_t *held, bool *stopped);

void tp_proc_held_resend(pid_t pid, pid_t tid, uint64_t *held)
{
	for (int sig = 1; sig <= 64; sig++)
		if (*held & 1ULL << (sig - 1))
			syscall(SYS_tgkill, pid, tid, sig);
	*held = 0;
}

int tp_proc_inject_step(struct tp_proc *p, pid_t tid, uint64_t *held)
{
	/* Signals that a step can raise stay as they were (blocking one would turn a fault
	 * into a kill); the others wait until the step is done: a timer signal every 100 us
	 * could otherwise come before every attempt at the step. */
	const uint64_t sync = 1ULL << (SIGSEGV - 1) | 1ULL << (SIGBUS - 1) | 1ULL << (SIGILL - 1) |
			      1ULL << (SIGFPE - 1) | 1ULL << (SIGTRAP - 1) | 1ULL << (SIGSYS - 1);
	uint64_t mask;
	bool masked = !tp_proc_get_sigmask(tid, &mask) && !tp_proc_set_sigmask(tid, mask | ~sync);
	bool stopped = unstop(p, tid);
	int r = step_once(p, tid, held, &stopped);

	if (masked && r != -ESRCH)
		tp_proc_set_sigmask(tid, mask);
	if (stopped && r != -ESRCH)
		restop(p, tid);
	return r;
}

/* One attempt at the step, retried after each signal stop that comes first. */
static int step_once(struct tp_proc *p, pid_t tid, uint64_t *held, bool *stopped)
{
	struct tp_event ev;
	int nsig = 0;
	int r = tp_proc_resume(p, tid, TP_RESUME_STEP, 0);

	if (r)
		return r;
	for (;;) {
		r = tp_proc_inject_wait_task(p, tid, &ev);
		if (r)
			return r;
		switch (ev.kind) {
		case TP_EV_STEP:
			return 0;
		case TP_EV_GROUP_STOP:
			/* A stop trap left by the attach, or a SIGSTOP: the step goes on. */
			*stopped |= unstop(p, tid);
			r = resume_unless_running(p, tid, TP_RESUME_STEP);
			if (r)
				return r;
			continue;
		case TP_EV_SIGNAL:
			/* The signal stop came before the step ran: step again. */
			{
				uint64_t dpc = 0;

				tp_proc_get_pc(tid, &dpc);
				tp_dbg(
				    "proc: step of %d at 0x%llx: signal %d (code %d, addr %p) held",
				    tid, (unsigned long long)dpc, ev.sig, ev.si.si_code,
				    ev.si.si_addr);
			}
			if (++nsig > STEP_SIGNALS_MAX)
				return -EIO;
			*held |= 1ULL << (ev.sig - 1);
			r = resume_unless_running(p, tid, TP_RESUME_STEP);
			if (r)
				return r;
			continue;
		default:
			/* A breakpoint or other trap reached by the stepped instruction. */
			return ev.kind == TP_EV_BREAKPOINT ? 0 : -EIO;
		}
	}
}

/* Run @tid to its next syscall stop; other tasks' events are deferred, a signal for @tid
 * held back into the set *@held. */
static int syscall_stop(struct tp_proc *p, pid_t tid, uint64_t *held, bool *stopped)
{
	struct tp_event ev;
	int r = tp_proc_resume(p, tid, TP_RESUME_SYSCALL, 0);

	while (!r) {
		r = tp_proc_inject_wait_task(p, tid, &ev);
		if (r)
			break;
		switch (ev.kind) {
		case TP_EV_SYSCALL:
			return 0;
		case TP_EV_SIGNAL:
			*held |= 1ULL << (ev.sig - 1);
			r = resume_unless_running(p, tid, TP_RESUME_SYSCALL);
			break;
		case TP_EV_GROUP_STOP:
			*stopped |= unstop(p, tid);
			r = resume_unless_running(p, tid, TP_RESUME_SYSCALL);
			break;
		default:
			return -EIO;
		}
	}
	return r;
}

bool tp_proc_inject_drop(struct tp_proc *p, pid_t tid, bool (*match)(const struct tp_event *ev))
{
	for (unsigned i = 0; i < p->qlen; i++) {
		struct tp_event *ev = &p->queue[(p->qhead + i) % p->qcap];
		struct tp_task *t;

		if (ev->tid != tid || !match(ev))
			continue;
		for (unsigned k = i; k + 1 < p->qlen; k++)
			p->queue[(p->qhead + k) % p->qcap] = p->queue[(p->qhead + k + 1) % p->qcap];
		p->qlen--;
		/* stopped with nothing to report: as held as a stop_all() stop */
		t = tp_proc_task_find(p, tid);
		if (t) {
			t->pending_sig = 0;
			t->held = !tp_proc_queued(p, tid);
		}
		return true;
	}
	return false;
}

static bool is_syscall_stop(const struct tp_event *ev)
{
	return ev->kind == TP_EV_SYSCALL;
}

/* A task at a syscall-entry stop (its tracer follows system calls) would run that syscall,
 * with the injected registers as its arguments, as soon as it is resumed: the syscall is
 * skipped instead (orig_rax -1) to its exit stop, and *@saved made to issue it again where
 * the task goes on (rip back on the syscall instruction, rax its number). */
static int off_syscall_entry(struct tp_proc *p, pid_t tid, struct user_regs_struct *saved,
			     uint64_t *held, bool *stopped)
{
	struct tp_syscall_stop st;
	struct user_regs_struct skip = *saved;
	int r;

	/* the stop taken by a stop_all() and queued, which the injection's waits would meet
	 * first: the task is in it now (an exit's line is lost for -S; an entry is made again) */
	tp_proc_inject_drop(p, tid, is_syscall_stop);
	if (tp_proc_syscall_info(tid, &st) || !st.entry)
		return 0;
	skip.orig_rax = (uint64_t)-1;
	r = tp_proc_set_regs(tid, &skip);
	if (!r)
		r = syscall_stop(p, tid, held, stopped);
	if (r)
		return r;
	saved->rax = saved->orig_rax;
	saved->orig_rax = (uint64_t)-1;
	saved->rip -= TP_ARCH_SYSCALL_LEN;
	return 0;
}

int tp_proc_inject_syscall(struct tp_proc *p, pid_t pid, pid_t tid, long nr, const uint64_t args[6],
			   int64_t *ret)
{
	struct user_regs_struct saved, regs, inj;
	uint8_t orig[TP_ARCH_SYSCALL_LEN], syscall_insn[TP_ARCH_SYSCALL_LEN];
	uint64_t at;
	int r, r2;
	uint64_t held = 0;
	bool stopped;

	r = tp_proc_auxv(pid, AT_ENTRY, &at);
	if (r)
		return r;
	r = tp_proc_get_regs(tid, &saved);
	if (r)
		return r;
	if (tp_proc_read(pid, at, orig, sizeof(orig)) != sizeof(orig))
		return -EIO;
	r = tp_arch_emit_syscall(syscall_insn);
	if (!r)
		r = tp_proc_write(pid, at, syscall_insn, sizeof(syscall_insn));
	if (r)
		return r;
	stopped = unstop(p, tid);
	r = off_syscall_entry(p, tid, &saved, &held, &stopped);
	/* a crash puts back the registers the end of this function would (restart included) */
	regs = saved;
	tp_arch_regs_restart_syscall(&regs);
	tp_proc_inflight_push(pid, tid, &regs, at, orig, sizeof(orig));
	regs = saved;
	regs.rip = at;
	/* No syscall restart on the way out of this stop: the injected syscall is not one. */
	tp_arch_regs_set_syscall(&regs, nr, args);
	inj = regs;
	/* Syscall stops, not a single-step: a step's trap, like an int3's, resets an ignored
	 * or blocked SIGTRAP to SIG_DFL.  A task stopped inside a syscall (the exec stop of a
	 * launched program) first reports that syscall's exit: other syscalls' stops are
	 * passed over until the entry and exit of ours. */
	if (!r)
		r = tp_proc_set_regs(tid, &inj);
	for (int seen = 0, other = 0; !r && seen < 2;) {
		r = syscall_stop(p, tid, &held, &stopped);
		if (!r)
			r = tp_proc_get_regs(tid, &regs);
		if (r)
			break;
		if (regs.rip == at + TP_ARCH_SYSCALL_LEN && (long)regs.orig_rax == nr)
			seen++;
		else /* that syscall's exit wrote its result over our registers */
			r = ++other > OTHER_SYSCALLS_MAX ? -EIO : tp_proc_set_regs(tid, &inj);
	}
	if (!r)
		*ret = (int64_t)regs.rax;
	r2 = tp_proc_write(pid, at, orig, sizeof(orig));
	if (r != -ESRCH) {
		/* Stopped inside an interrupted syscall (attached), the task was to restart it
		 * on its way out; from the syscall-exit stop it resumes at now, the kernel no
		 * longer would: restart it here, as the kernel does when no handler runs. */
		tp_arch_regs_restart_syscall(&saved);
		int r3 = tp_proc_set_regs(tid, &saved);

		if (!r2)
			r2 = r3;
		if (stopped)
			restop(p, tid);
	}
	tp_proc_inflight_pop();
	tp_proc_held_resend(pid, tid, &held);
	tp_proc_inject_flush(p);
	return r ? r : r2;
}

/* A signal the task's own instruction raised: SIGSEGV, SIGBUS, SIGILL or SIGFPE from the
 * kernel (si_code > 0; SI_KERNEL is a general protection fault).  Not an interval timer's
 * SIGALRM (SI_KERNEL too), nor a fault signal sent by kill (SI_USER): those are the
 * program's, held for it while the injected function runs on. */
static bool is_fault(const struct tp_event *ev)
{
	switch (ev->sig) {
	case SIGSEGV:
	case SIGBUS:
	case SIGILL:
	case SIGFPE:
		return ev->si.si_code > 0;
	default:
		return false;
	}
}

int tp_proc_inject_call(struct tp_proc *p, pid_t pid, pid_t tid, uint64_t fn,
			const uint64_t args[6], uint64_t ret_to, tp_proc_inject_trap_fn on_trap,
			void *arg, uint64_t *ret)
{
	struct user_regs_struct saved, regs;
	struct tp_event ev;
	uint64_t sp, to;
	int r;
	uint64_t held = 0;
	bool stopped;
	size_t xlen = 0;
	void *xstate;

	r = tp_proc_get_regs(tid, &saved);
	if (r)
		return r;
	/* the function may use the vector registers, which the program's code there may hold
	 * values in (any register is live at an arbitrary stop) */
	xstate = tp_proc_xstate_save(tid, &xlen);
	if (!xstate)
		return -EIO;
	/* Below the red zone, aligned as at a call: [rsp] = return address, rsp + 8 % 16 = 0. */
	sp = tp_arch_call_sp(saved.rsp, CALL_STACK_GAP - TP_ARCH_RED_ZONE);
	r = tp_proc_write(pid, sp, &ret_to, sizeof(ret_to));
	if (r) {
		free(xstate);
		return r;
	}
	stopped = unstop(p, tid);
	r = off_syscall_entry(p, tid, &saved, &held, &stopped);
	tp_proc_inflight_push(pid, tid, &saved, 0, NULL, 0);
	regs = saved;
	/* orig_rax = -1: no syscall restart on the way out of this stop; and the call is not
	 * stepped, should the task have TF set (an agent stepping it) */
	tp_arch_regs_set_call(&regs, fn, sp, args);
	regs.eflags &= ~TP_ARCH_EFLAGS_TF;
	if (!r)
		r = tp_proc_set_regs(tid, &regs);
	if (!r)
		r = tp_proc_resume(p, tid, TP_RESUME_CONT, 0);
	while (!r) {
		r = tp_proc_inject_wait_task(p, tid, &ev);
		if (r)
			break;
		if (ev.kind == TP_EV_SIGNAL && is_fault(&ev)) {
			/* A fault of the function itself (it needed something not set up
			 * yet): give up, nothing of it reaches the program. */
			r = -EFAULT;
			break;
		}
		if (ev.kind == TP_EV_SIGNAL) {
			held |= 1ULL << (ev.sig - 1);
			r = resume_unless_running(p, tid, TP_RESUME_CONT);
			continue;
		}
		if (ev.kind == TP_EV_GROUP_STOP) {
			stopped |= unstop(p, tid);
			r = resume_unless_running(p, tid, TP_RESUME_CONT);
			continue;
		}
		if (ev.kind != TP_EV_BREAKPOINT || tp_proc_get_regs(tid, &regs)) {
			r = -EIO;
			break;
		}
		if (regs.rip - 1 == ret_to && regs.rsp == sp + 8) {
			*ret = regs.rax;
			break;
		}
		r = on_trap ? on_trap(arg, tid, regs.rip, &to) : -EIO;
		if (!r)
			r = tp_proc_set_pc(tid, to);
		if (!r)
			r = tp_proc_resume(p, tid, TP_RESUME_CONT, 0);
	}
	if (r != -ESRCH) {
		int r2 = tp_proc_set_regs(tid, &saved);
		int r3 = tp_proc_xstate_restore(tid, xstate, xlen);

		if (!r)
			r = r2 ? r2 : r3;
		if (stopped)
			restop(p, tid);
	} else {
		free(xstate);
	}
	tp_proc_inflight_pop();
	tp_proc_held_resend(pid, tid, &held);
	tp_proc_inject_flush(p);
	return r;
}
