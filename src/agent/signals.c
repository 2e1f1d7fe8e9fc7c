/* Signal virtualisation: the program keeps believing it owns every signal, while the agent
 * keeps SIGTRAP for its stepper and runs the program's handlers with TF set so that their
 * instructions are counted.  rt_sigaction and rt_sigprocmask calls of counted threads are
 * emulated from the SIGTRAP handler; the program reads back exactly what it installed. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>

#include "agent/agent-priv.h"
#include "agent/raw.h"

#define NSIG_MAX 64

struct vact {
	struct tp_ksigaction act;
	int valid;
};

static struct vact virt[NSIG_MAX + 1];
static uint32_t virt_lock;

static int is_handler(void *h)
{
	return h != SIG_DFL && h != SIG_IGN;
}

static void lock(void)
{
	while (__atomic_exchange_n(&virt_lock, 1, __ATOMIC_ACQUIRE))
		tp_raw0(SYS_sched_yield);
}

static void unlock(void)
{
	__atomic_store_n(&virt_lock, 0, __ATOMIC_RELEASE);
}

/* What the kernel gets for the program's action @v on @sig. */
static void real_action(int sig, const struct tp_ksigaction *v, struct tp_ksigaction *r)
{
	*r = *v;
	r->mask &= ~tp_sigbit(SIGTRAP);
	if (is_handler(v->handler)) {
		r->handler = (void *)tp_sig_entry;
		r->flags |= SA_SIGINFO;
	}
}

static long ksigaction(int sig, const struct tp_ksigaction *act, struct tp_ksigaction *old)
{
	return tp_raw4(SYS_rt_sigaction, sig, act, old, 8);
}

int tp_sig_virtual(int sig, struct tp_ksigaction *out)
{
	int valid;

	if (sig < 1 || sig > NSIG_MAX)
		return 0;
	lock();
	valid = virt[sig].valid;
	if (valid)
		*out = virt[sig].act;
	unlock();
	return valid;
}

void tp_sig_refresh(int sig)
{
	struct tp_ksigaction cur, real;

	if (sig < 1 || sig > NSIG_MAX || sig == SIGKILL || sig == SIGSTOP)
		return;
	lock();
	if (!ksigaction(sig, NULL, &cur) && cur.handler != (void *)tp_sig_entry &&
	    cur.handler != (void *)tp_trap_handler) {
		virt[sig].act = cur;
		virt[sig].valid = 1;
		if (sig == SIGTRAP)
			tp_stepper_install();
		else if (is_handler(cur.handler)) {
			real_action(sig, &cur, &real);
			ksigaction(sig, &real, NULL);
		}
	}
	unlock();
}

int tp_sig_init(void)
{
	for (int sig = 1; sig <= NSIG_MAX; sig++) {
		struct tp_ksigaction cur, real;

		if (sig == SIGKILL || sig == SIGSTOP || ksigaction(sig, NULL, &cur))
			continue;
		virt[sig].act = cur;
		virt[sig].valid = 1;
		if (sig != SIGTRAP && is_handler(cur.handler)) {
			real_action(sig, &cur, &real);
			if (ksigaction(sig, &real, NULL))
				return -1;
		}
	}
	return 0;
}

long tp_sig_emulate_sigaction(ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	int sig = (int)g[REG_RDI];
	uint64_t act = (uint64_t)g[REG_RSI], oact = (uint64_t)g[REG_RDX];
	struct tp_ksigaction na, old, real;
	long r;

	if (g[REG_R10] != 8 || sig < 1 || sig > NSIG_MAX)
		return -EINVAL;
	if (act && tp_agent_read(act, &na, sizeof(na)))
		return -EFAULT;
	if (act && (sig == SIGKILL || sig == SIGSTOP))
		return -EINVAL;
	lock();
	if (virt[sig].valid) {
		old = virt[sig].act;
	} else if ((r = ksigaction(sig, NULL, &old))) {
		unlock();
		return r;
	}
	if (act) {
		if (sig != SIGTRAP) {
			real_action(sig, &na, &real);
			r = ksigaction(sig, &real, NULL);
			if (r) {
				unlock();
				return r;
			}
		}
		virt[sig].act = na;
		virt[sig].valid = 1;
	}
	unlock();
	if (oact && tp_agent_write(oact, &old, sizeof(old)))
		return -EFAULT;
	return 0;
}

long tp_sig_emulate_sigprocmask(struct tp_tstate *ts, ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	uint64_t set = (uint64_t)g[REG_RSI], oset = (uint64_t)g[REG_RDX];
	uint64_t cur, want = 0, nm;

	if (g[REG_R10] != 8)
		return -EINVAL;
	memcpy(&cur, &uc->uc_sigmask, sizeof(cur));
	if (ts->trap_blocked)
		cur |= tp_sigbit(SIGTRAP);
	if (set) {
		if (tp_agent_read(set, &want, sizeof(want)))
			return -EFAULT;
		switch (g[REG_RDI]) {
		case SIG_BLOCK:
			nm = cur | want;
			break;
		case SIG_UNBLOCK:
			nm = cur & ~want;
			break;
		case SIG_SETMASK:
			nm = want;
			break;
		default:
			return -EINVAL;
		}
	}
	if (oset && tp_agent_write(oset, &cur, sizeof(cur)))
		return -EFAULT;
	if (set) {
		nm &= ~(tp_sigbit(SIGKILL) | tp_sigbit(SIGSTOP));
		ts->trap_blocked = !!(nm & tp_sigbit(SIGTRAP));
		nm &= ~tp_sigbit(SIGTRAP);
		/* the mask takes effect when the stepper's handler returns */
		memcpy(&uc->uc_sigmask, &nm, sizeof(nm));
	}
	return 0;
}

/* Deliver @sig with its default action, as the kernel would have. */
static void default_action(int sig)
{
	struct tp_ksigaction dfl = {0};

	ksigaction(sig, &dfl, NULL);
	tp_raw3(SYS_tgkill, tp_raw0(SYS_getpid), tp_raw0(SYS_gettid), sig);
}

/* Take the program's action for @sig at delivery, honouring SA_RESETHAND. */
static void *take_handler(int sig)
{
	void *h;

	lock();
	h = virt[sig].act.handler;
	if (virt[sig].act.flags & SA_RESETHAND) {
		virt[sig].act.handler = SIG_DFL;
		virt[sig].act.flags &= ~SA_SIGINFO;
	}
	unlock();
	return h;
}

static int stepped(const ucontext_t *uc)
{
	return !tp_ag.disabled && tp_ag.active && tp_ts.counting &&
	       (uc->uc_mcontext.gregs[REG_EFL] & TP_EFLAGS_TF);
}

struct tp_dispatch {
	uint64_t handler;
	uint64_t tf;
};

/* Called by tp_sig_entry: which program handler to run, and whether to step it. */
TP_HIDDEN struct tp_dispatch tp_sig_dispatch(int sig, siginfo_t *si, ucontext_t *uc)
{
	struct tp_dispatch d = {(uint64_t)(uintptr_t)tp_noop_handler, 0};
	void *h;

	if (sig < 1 || sig > NSIG_MAX)
		return d;
	h = take_handler(sig);
	if (h == SIG_IGN)
		return d;
	if (h == SIG_DFL) {
		default_action(sig);
		return d;
	}
	d.handler = (uint64_t)(uintptr_t)h;
	if (stepped(uc)) {
		/* The interrupted instruction runs after the handler's sigreturn, which counts
		 * it then.  Delivered at a syscall's exit, it was pending and not counted yet;
		 * delivered after a trap, that trap counted it: take that back. */
		if (tp_ts.pending)
			tp_ts.pending = 0;
		else
			tp_uncount_pc(&tp_ts, (uint64_t)uc->uc_mcontext.gregs[REG_RIP]);
		d.tf = 1;
	}
	return d;
}

/* A SIGTRAP that is not the stepper's (int3 in the program, kill -TRAP): the program's
 * own disposition applies. */
void tp_sig_foreign_trap(int sig, siginfo_t *si, ucontext_t *uc)
{
	void *h = take_handler(SIGTRAP);

	if (h == SIG_IGN && si->si_code <= 0)
		return; /* a sent SIGTRAP is ignored; a trap the CPU raised is not */
	if (!is_handler(h)) {
		default_action(SIGTRAP);
		return;
	}
	if (stepped(uc)) {
		/* Natively the handler would return through the program's restorer and the
		 * interrupted instruction would run after rt_sigreturn without a trap of its
		 * own (unless a trap had counted it already: an asynchronous SIGTRAP). */
		struct tp_ksigaction act = {0};
		int fresh = tp_ts.pending || si->si_code == SI_KERNEL;
		unsigned len = 0;

		tp_ts.pending = 0;
		tp_sig_virtual(SIGTRAP, &act);
		tp_call_handler_tf(h, sig, si, uc);
		if ((act.flags & TP_SA_RESTORER) && act.restorer) {
			tp_count_pc(&tp_ts, (uint64_t)(uintptr_t)act.restorer, &len);
			if (len)
				tp_count_pc(&tp_ts, (uint64_t)(uintptr_t)act.restorer + len, NULL);
		}
		if (fresh)
			tp_ts.pending = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	} else {
		((void (*)(int, siginfo_t *, void *))h)(sig, si, uc);
	}
}
