/* The libc functions that change signal dispositions and masks, interposed so that a thread
 * the stepper does not step yet cannot take SIGTRAP away from it (the SIGTRAP handler and
 * SIGTRAP unblocked are what the --start breakpoint needs).  A stepped thread runs libc's
 * own function with TF set instead, and its syscall is virtualised by the stepper, so its
 * instructions are counted as without the agent.  Other ways to reach the syscall (a raw
 * syscall, sigset(), sigvec()) are only seen while stepping. */
#include <dlfcn.h>
#include <signal.h>
#include <string.h>

#include "rt/rt.h"
#include "rt/sig-priv.h"

enum {
	W_SIGACTION = TP_RT_WRAP_SIGACTION,
	W_SIGNAL = TP_RT_WRAP_SIGNAL,
	W_SIGPROCMASK = TP_RT_WRAP_SIGPROCMASK,
	W_PTHREAD_SIGMASK = TP_RT_WRAP_PTHREAD_SIGMASK,
	W_COUNT
};

static const char *const names[W_COUNT] = {"sigaction", "signal", "sigprocmask", "pthread_sigmask"};
static void *real[W_COUNT];

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef __sighandler_t (*signal_fn)(int, __sighandler_t);
typedef int (*mask_fn)(int, const sigset_t *, sigset_t *);

/* Called from the constructor before any engine counts, so that each engine sees the same
 * dynamic-linker work; resolved lazily when the agent runs without tracepad. */
void tp_rt_wrap_init(const struct tp_rt_sig_host *host)
{
	tp_rt_sig_host = host;
	for (int i = 0; i < W_COUNT; i++)
		if (!real[i])
			real[i] = dlsym(RTLD_NEXT, names[i]);
}

static void to_user(const struct tp_ksigaction *k, struct sigaction *u)
{
	memset(u, 0, sizeof(*u));
	u->sa_handler = (__sighandler_t)k->handler;
	memcpy(&u->sa_mask, &k->mask, sizeof(k->mask));
	u->sa_flags = (int)k->flags;
	u->sa_restorer = (void (*)(void))k->restorer;
}

static int plain_sigaction(int sig, const struct sigaction *act, struct sigaction *oact)
{
	struct tp_ksigaction old;
	int have_old = tp_rt_sig_virtual(sig, &old);
	int r = ((sigaction_fn)real[W_SIGACTION])(sig, act, oact);

	if (r == 0) {
		if (act)
			tp_rt_sig_refresh(sig);
		if (oact && have_old)
			to_user(&old, oact);
	}
	return r;
}

static __sighandler_t plain_signal(int sig, __sighandler_t h)
{
	struct tp_ksigaction old;
	int have_old = tp_rt_sig_virtual(sig, &old);
	__sighandler_t r = ((signal_fn)real[W_SIGNAL])(sig, h);

	if (r == SIG_ERR)
		return r;
	tp_rt_sig_refresh(sig);
	return have_old ? (__sighandler_t)old.handler : r;
}

/* Bit operations on the first word of a sigset_t (signals 1-64, all the kernel reads), done
 * inline: a call into libc from here would be counted by the ptrace engine. */
static int has_trap(const sigset_t *set)
{
	return (int)((((const unsigned long *)set)[0] >> (SIGTRAP - 1)) & 1);
}

static void set_trap(sigset_t *set, int on)
{
	unsigned long *w = (unsigned long *)set;

	if (on)
		w[0] |= 1ul << (SIGTRAP - 1);
	else
		w[0] &= ~(1ul << (SIGTRAP - 1));
}

/* The program's mask calls never block SIGTRAP for real: a trap (the stepper's, a
 * breakpoint's, or ptrace's single-step) with SIGTRAP blocked would make the kernel unblock
 * it and reset its handler to SIG_DFL.  The thread's wish is kept and read back instead. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static int
plain_mask(int which, int how, const sigset_t *set, sigset_t *oset)
{
	int blocked = tp_rt_trap_blocked, now = blocked, r;
	unsigned long tmp[sizeof(sigset_t) / sizeof(unsigned long)];

	if (set) {
		for (size_t i = 0; i < sizeof(tmp) / sizeof(tmp[0]); i++)
			tmp[i] = ((const unsigned long *)set)[i];
		if (has_trap(set))
			now = how == SIG_UNBLOCK ? 0 : 1;
		else if (how == SIG_SETMASK)
			now = 0;
		set_trap((sigset_t *)tmp, 0);
	}
	r = ((mask_fn)real[which])(how, set ? (sigset_t *)tmp : NULL, oset);
	if (r)
		return r;
	if (oset)
		set_trap(oset, blocked);
	if (set && (how == SIG_BLOCK || how == SIG_UNBLOCK || how == SIG_SETMASK))
		tp_rt_trap_blocked = (uint8_t)now;
	return 0;
}

static int plain_sigprocmask(int how, const sigset_t *set, sigset_t *oset)
{
	return plain_mask(W_SIGPROCMASK, how, set, oset);
}

static int plain_pthread_sigmask(int how, const sigset_t *set, sigset_t *oset)
{
	return plain_mask(W_PTHREAD_SIGMASK, how, set, oset);
}

static void *const plain[W_COUNT] = {(void *)plain_sigaction, (void *)plain_signal,
				     (void *)plain_sigprocmask, (void *)plain_pthread_sigmask};

struct tp_route {
	uint64_t target;
	uint64_t tf;
};

/* Called by the host's interposed entry points: where to go, and whether to set TF. */
TP_RT_HIDDEN struct tp_route tp_rt_wrap_route(int which)
{
	struct tp_route r = {0, 0};

	if (which < 0 || which >= W_COUNT)
		which = 0;
	if (!real[which])
		real[which] = dlsym(RTLD_NEXT, names[which]);
	r.target = (uint64_t)(uintptr_t)real[which];
	switch (tp_rt_sig_host ? tp_rt_sig_host->route(which) : 0) {
	case 0:
		return r;
	case 1:
		r.target = (uint64_t)(uintptr_t)plain[which];
		return r;
	default:
		r.tf = 1;
		return r;
	}
}
