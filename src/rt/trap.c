/* The one SIGTRAP dispatcher of a runtime: every in-process user of traps (the agent's
 * stepper, the patcher, the hooks to come) registers a client; a trap that no client claims
 * goes to the program, through the signal virtualisation (owner mode, the agent) or to the
 * action that was installed before the dispatcher (chained mode, libtracepad). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>

#include "rt/raw.h"
#include "rt/rt.h"

enum { MODE_NONE, MODE_OWNER, MODE_CHAIN };

static struct {
	int claimed;
	void *ctx;
	tp_rt_trap_fn fn; /* published last */
} clients[TP_RT_TRAP_CLIENTS];

static int mode;
static tp_rt_trap_foreign_fn foreign;
static struct sigaction old_trap;

int tp_rt_trap_register(tp_rt_trap_fn fn, void *ctx)
{
	for (unsigned i = 0; i < TP_RT_TRAP_CLIENTS; i++) {
		int zero = 0;

		if (!__atomic_compare_exchange_n(&clients[i].claimed, &zero, 1, 0, __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
			continue;
		clients[i].ctx = ctx;
		__atomic_store_n(&clients[i].fn, fn, __ATOMIC_RELEASE);
		return 0;
	}
	return -ENOSPC;
}

void tp_rt_trap_unregister(tp_rt_trap_fn fn, void *ctx)
{
	for (unsigned i = 0; i < TP_RT_TRAP_CLIENTS; i++) {
		if (__atomic_load_n(&clients[i].fn, __ATOMIC_ACQUIRE) != fn ||
		    clients[i].ctx != ctx)
			continue;
		__atomic_store_n(&clients[i].fn, NULL, __ATOMIC_RELEASE);
		__atomic_store_n(&clients[i].claimed, 0, __ATOMIC_RELEASE);
		return;
	}
}

/* Chained mode: what the program had installed before us. */
static void chain(int sig, siginfo_t *si, void *uc)
{
	if (old_trap.sa_flags & SA_SIGINFO) {
		old_trap.sa_sigaction(sig, si, uc);
	} else if (old_trap.sa_handler == SIG_IGN) {
		return;
	} else if (old_trap.sa_handler == SIG_DFL) {
		/* raw: libc's signal and raise may be hooked (calls --engine agent), and this
		 * is no call of the program's */
		struct tp_ksigaction dfl = {0};

		tp_raw4(SYS_rt_sigaction, sig, &dfl, NULL, 8);
		tp_raw3(SYS_tgkill, tp_raw0(SYS_getpid), tp_raw0(SYS_gettid), sig);
	} else {
		old_trap.sa_handler(sig);
	}
}

void tp_rt_trap_handler(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;

	for (unsigned i = 0; i < TP_RT_TRAP_CLIENTS; i++) {
		tp_rt_trap_fn fn = __atomic_load_n(&clients[i].fn, __ATOMIC_ACQUIRE);

		if (fn && fn(si, uc, clients[i].ctx))
			return;
	}
	if (mode == MODE_OWNER && foreign)
		foreign(sig, si, uc);
	else
		chain(sig, si, ucv);
}

#define STR_(x) #x
#define STR(x) STR_(x)
/* The restorer of the dispatcher in owner mode: its frames return through rt_sigreturn. */
__asm__(".text\n"
	".p2align 4\n"
	".globl tp_rt_restore_rt\n"
	".hidden tp_rt_restore_rt\n"
	".type tp_rt_restore_rt, @function\n"
	"tp_rt_restore_rt:\n"
	"\tmov $" STR(SYS_rt_sigreturn) ", %eax\n"
					"\tsyscall\n"
					".size tp_rt_restore_rt, .-tp_rt_restore_rt\n");

int tp_rt_trap_own(tp_rt_trap_foreign_fn fn)
{
	struct tp_ksigaction sa = {0};
	long r;

	sa.handler = (void *)tp_rt_trap_handler;
	sa.flags = SA_SIGINFO | SA_NODEFER | SA_RESTART | TP_SA_RESTORER;
	sa.restorer = (void *)tp_rt_restore_rt;
	sa.mask = ~tp_sigbit(SIGTRAP);
	if (fn)
		foreign = fn;
	r = tp_raw4(SYS_rt_sigaction, SIGTRAP, &sa, NULL, 8);
	if (!r)
		mode = MODE_OWNER;
	return (int)r;
}

/* Raw system calls: this runs at each patch batch, and libc's sigaction may be one of the
 * functions being hooked (calls --engine agent), its bytes half-written. */
int tp_rt_trap_chain(void)
{
	struct tp_ksigaction cur, sa = {0};
	long r;

	if (mode == MODE_OWNER)
		return 0;
	r = tp_raw4(SYS_rt_sigaction, SIGTRAP, NULL, &cur, 8);
	if (r)
		return (int)r;
	if ((cur.flags & SA_SIGINFO) && cur.handler == (void *)tp_rt_trap_handler)
		return 0;
	sa.handler = (void *)tp_rt_trap_handler;
	sa.flags = SA_SIGINFO | SA_RESTART | TP_SA_RESTORER;
	sa.restorer = (void *)tp_rt_restore_rt;
	r = tp_raw4(SYS_rt_sigaction, SIGTRAP, &sa, &cur, 8);
	if (r)
		return (int)r;
	memset(&old_trap, 0, sizeof(old_trap));
	old_trap.sa_handler = (__sighandler_t)cur.handler;
	old_trap.sa_flags = (int)cur.flags;
	memcpy(&old_trap.sa_mask, &cur.mask, sizeof(cur.mask));
	mode = MODE_CHAIN;
	return 0;
}
