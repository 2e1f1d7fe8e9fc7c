/* Signal virtualisation: the program keeps believing it owns every signal, while the
 * runtime keeps SIGTRAP for its dispatcher and its host (the agent's stepper) runs the
 * program's handlers with TF set so that their instructions are counted.  rt_sigaction and
 * rt_sigprocmask calls of stepped threads are emulated from the SIGTRAP handler; the program
 * reads back exactly what it installed. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>

#include "rt/raw.h"
#include "rt/rt.h"
#include "rt/sig-priv.h"

#define NSIG_MAX 64

struct vact {
	struct tp_ksigaction act;
	int valid;
};

static struct vact virt[NSIG_MAX + 1];
static uint32_t virt_lock;
const struct tp_rt_sig_host *tp_rt_sig_host;
__thread uint8_t tp_rt_trap_blocked __attribute__((tls_model("initial-exec")));

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
		r->handler = (void *)tp_rt_sig_entry;
		r->flags |= SA_SIGINFO;
	}
}

static long ksigaction(int sig, const struct tp_ksigaction *act, struct tp_ksigaction *old)
{
	return tp_raw4(SYS_rt_sigaction, sig, act, old, 8);
}

int tp_rt_sig_virtual(int sig, struct tp_ksigaction *out)
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

void tp_rt_sig_refresh(int sig)
{
	struct tp_ksigaction cur, real;

	if (sig < 1 || sig > NSIG_MAX || sig == SIGKILL || sig == SIGSTOP)
		return;
	lock();
	if (!ksigaction(sig, NULL, &cur) && cur.handler != (void *)tp_rt_sig_entry &&
	    cur.handler != (void *)tp_rt_trap_handler) {
		virt[sig].act = cur;
		virt[sig].valid = 1;
		if (sig == SIGTRAP)
			tp_rt_trap_own(NULL);
		else if (is_handler(cur.handler)) {
			real_action(sig, &cur, &real);
			ksigaction(sig, &real, NULL);
		}
	}
	unlock();
}

int tp_rt_sig_init(const struct tp_rt_sig_host *h)
{
	tp_rt_sig_host = h;
	for (int sig = 1; sig <= NSIG_MAX; sig++) {
		struct tp_ksigaction cur, real;

		if (sig == SIGKILL || sig == SIGSTOP || ksigaction(sig, NULL, &cur))
			continue;
		/* Ours, left by an earlier session (an agent attached again): the program's
		 * action is the virtual one kept since. */
		if ((cur.handler == (void *)tp_rt_sig_entry ||
		     cur.handler == (void *)tp_rt_trap_handler) &&
		    virt[sig].valid)
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

void tp_rt_sig_fini(void)
{
	lock();
	for (int sig = 1; sig <= NSIG_MAX; sig++) {
		struct tp_ksigaction cur;

		if (sig == SIGTRAP || !virt[sig].valid || ksigaction(sig, NULL, &cur) ||
		    cur.handler != (void *)tp_rt_sig_entry)
			continue;
		ksigaction(sig, &virt[sig].act, NULL);
	}
	unlock();
}

long tp_rt_sig_emulate_sigaction(ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	int sig = (int)g[REG_RDI];
	uint64_t act = (uint64_t)g[REG_RSI], oact = (uint64_t)g[REG_RDX];
	struct tp_ksigaction na, old, real;
	long r;

	if (g[REG_R10] != 8 || sig < 1 || sig > NSIG_MAX)
		return -EINVAL;
	if (act && tp_rt_mem_read(act, &na, sizeof(na)))
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
	if (oact && tp_rt_mem_write(oact, &old, sizeof(old)))
		return -EFAULT;
	return 0;
}

long tp_rt_sig_emulate_sigprocmask(ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	uint64_t set = (uint64_t)g[REG_RSI], oset = (uint64_t)g[REG_RDX];
	uint64_t cur, want = 0, nm;

	if (g[REG_R10] != 8)
		return -EINVAL;
	memcpy(&cur, &uc->uc_sigmask, sizeof(cur));
	if (tp_rt_trap_blocked)
		cur |= tp_sigbit(SIGTRAP);
	if (set) {
		if (tp_rt_mem_read(set, &want, sizeof(want)))
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
	if (oset && tp_rt_mem_write(oset, &cur, sizeof(cur)))
		return -EFAULT;
	if (set) {
		nm &= ~(tp_sigbit(SIGKILL) | tp_sigbit(SIGSTOP));
		tp_rt_trap_blocked = !!(nm & tp_sigbit(SIGTRAP));
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
	return tp_rt_sig_host && tp_rt_sig_host->stepped(uc);
}

struct tp_dispatch {
	uint64_t handler;
	uint64_t tf;
};

/* Called by tp_rt_sig_entry: which program handler to run, and whether to step it. */
TP_RT_HIDDEN struct tp_dispatch tp_rt_sig_dispatch(int sig, siginfo_t *si, ucontext_t *uc)
{
	struct tp_dispatch d = {(uint64_t)(uintptr_t)tp_rt_noop_handler, 0};
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
		tp_rt_sig_host->handler_enter(uc);
		d.tf = 1;
	}
	return d;
}

/* A SIGTRAP that is not the stepper's (int3 in the program, kill -TRAP): the program's
 * own disposition applies. */
void tp_rt_sig_foreign_trap(int sig, siginfo_t *si, ucontext_t *uc)
{
	void *h = take_handler(SIGTRAP);

	if (h == SIG_IGN && si->si_code <= 0)
		return; /* a sent SIGTRAP is ignored; a trap the CPU raised is not */
	if (!is_handler(h)) {
		if (tp_rt_sig_host && tp_rt_sig_host->trap_fatal)
			tp_rt_sig_host->trap_fatal(si, uc);
		default_action(SIGTRAP);
		return;
	}
	if (stepped(uc)) {
		tp_rt_sig_host->trap_handler(h, sig, si, uc);
	} else {
		((void (*)(int, siginfo_t *, void *))h)(sig, si, uc);
	}
}
