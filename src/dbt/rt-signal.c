/* Signals under the code cache: the program's handlers run in the cache.  The kernel enters
 * a runtime trampoline instead of each handler; the trampoline saves the thread's scratch
 * slots (a signal may interrupt cache code or the runtime while they are live), shows the
 * handler the program's pc instead of the cache's (rt-map.c) and goes on at the handler's
 * translation.  rt_sigreturn puts the slots and the cache pc back before the kernel
 * restores the interrupted context. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>

#include "dbt/rt-priv.h"
#include "rt/raw.h"
#include "rt/rt.h"

/* The program's handlers, by signal: what the kernel would call without the runtime. */
static uint64_t handlers[65];

/* SIGSEGV is the runtime's while pages are write-protected for it (rt-smc.c): the
 * kernel keeps the trampoline whatever the program asks, and the program's action is
 * kept here and given back to it. */
static struct {
	int own;
	struct tp_ksigaction prog;
} segv;

static long segv_ours(void)
{
	struct tp_ksigaction k = {.handler = (void *)&tp_dbt_rt_sigtramp,
				  .flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | TP_SA_RESTORER,
				  .restorer = (void *)&tp_dbt_rt_sigreturn};

	return tp_raw4(SYS_rt_sigaction, SIGSEGV, &k, NULL, 8);
}

uint64_t tp_dbt_sig_handler(int sig)
{
	return sig > 0 && sig < 65 ? handlers[sig] : 0;
}

void tp_dbt_sig_native(void)
{
	for (int sig = 1; sig < 65; sig++) {
		struct tp_ksigaction k;

		if (sig == SIGSEGV && segv.own) {
			tp_raw4(SYS_rt_sigaction, sig, &segv.prog, NULL, 8);
			continue;
		}
		if (!handlers[sig] || tp_raw4(SYS_rt_sigaction, sig, NULL, &k, 8))
			continue;
		k.handler = (void *)(uintptr_t)handlers[sig];
		tp_raw4(SYS_rt_sigaction, sig, &k, NULL, 8);
	}
}

int tp_dbt_sig_own_segv(void)
{
	if (segv.own)
		return 0;
	if (tp_raw4(SYS_rt_sigaction, SIGSEGV, NULL, &segv.prog, 8))
		return -1;
	if (handlers[SIGSEGV]) {
		/* the kernel has the trampoline already, with the program's flags */
		segv.prog.handler = (void *)(uintptr_t)handlers[SIGSEGV];
	} else if (segv_ours()) {
		return -1;
	}
	segv.own = 1;
	return 0;
}

/* A SIGSEGV while the runtime owns it: a write to a guarded page goes on (0); else the
 * program's handler (its address), or the program's default action, as natively. */
static uint64_t segv_enter(struct tp_dbt_thread *t, siginfo_t *si, ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	uint64_t h;

	/* a page fault (14) of a write (2) to a present page (1) */
	if (g[REG_TRAPNO] == 14 && (g[REG_ERR] & 3) == 3) {
		int in = __atomic_load_n(&t->in_c, __ATOMIC_SEQ_CST), fixed;

		/* in the runtime's C code, which holds the lock already */
		if (!in)
			tp_dbt_c_enter(t);
		fixed = tp_dbt_smc_fault((uint64_t)g[REG_CR2]);
		if (!in)
			tp_dbt_c_leave(t);
		if (fixed)
			return 0;
	}
	h = handlers[SIGSEGV];
	if (h && (segv.prog.flags & SA_RESETHAND)) {
		/* the kernel would reset it: the runtime does, keeping its own */
		handlers[SIGSEGV] = 0;
		segv.prog.handler = SIG_DFL;
		segv.prog.flags &= ~(unsigned long)SA_RESETHAND;
		segv_ours();
	}
	if (h)
		return h;
	/* the program's default action: the counts so far, then the fault again (or the
	 * signal sent again) with the default action in place */
	tp_dbt_flush_all();
	segv.prog.handler = SIG_DFL;
	tp_raw4(SYS_rt_sigaction, SIGSEGV, &segv.prog, NULL, 8);
	if (si->si_code <= 0)
		tp_raw2(SYS_kill, tp_raw0(SYS_getpid), SIGSEGV);
	return 0;
}

/* The program's pc while the runtime's own code runs (outside its C code, where signals
 * wait): where it goes on, which NEXT holds (rt-entry.S), a cache or a program address. */
static uint64_t runtime_pc(uint64_t next)
{
	uint64_t pc = tp_dbt_map_program_pc(next);

	if (pc || !next || tp_dbt_in_runtime(next))
		return pc;
	return next;
}

uint64_t tp_dbt_sig_enter(int sig, siginfo_t *si, ucontext_t *uc)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	uint64_t h = sig > 0 && sig < 65 ? handlers[sig] : 0;
	int n;

	if (sig == SIGSEGV && segv.own && !(h = segv_enter(t, si, uc)))
		return 0;
	if (__atomic_load_n(&t->in_c, __ATOMIC_SEQ_CST)) {
		/* one deferred signal a thread, as the kernel keeps one of each standard one */
		if (!t->npending) {
			t->pending = *si;
			t->npending = 1;
		}
		return 0;
	}
	n = __atomic_fetch_add(&t->nsave, 1, __ATOMIC_SEQ_CST);
	if (n < TP_DBT_SAVES) {
		struct tp_dbt_saved *s = &t->save[n];

		s->uc = (uint64_t)(uintptr_t)uc;
		s->rax = t->rax;
		s->rcx0 = t->rcx0;
		s->rdx = t->rdx;
		s->next = t->next;
		s->arg = t->arg;
		s->count = t->count;
		s->ibl_rcx = t->ibl_rcx;
		s->ibl_rdx = t->ibl_rdx;
		s->cache_pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
		s->prog_pc = tp_dbt_map_program_pc(s->cache_pc);
		if (!s->prog_pc && tp_dbt_in_runtime(s->cache_pc))
			s->prog_pc = runtime_pc(s->next);
		if (s->prog_pc) {
			/* right after a syscall, rcx holds the pc after it, as rip does */
			if ((uint64_t)uc->uc_mcontext.gregs[REG_RCX] == s->cache_pc)
				uc->uc_mcontext.gregs[REG_RCX] = (greg_t)s->prog_pc;
			uc->uc_mcontext.gregs[REG_RIP] = (greg_t)s->prog_pc;
			/* the faulting instruction's address */
			if ((sig == SIGILL || sig == SIGFPE) && si->si_addr == (void *)s->cache_pc)
				si->si_addr = (void *)(uintptr_t)s->prog_pc;
		}
	} else {
		__atomic_fetch_sub(&t->nsave, 1, __ATOMIC_SEQ_CST);
		tp_dbt_fail("signal handlers nested too deeply", 0);
	}
	return h;
}

extern const uint8_t tp_dbt_tpl_count[], tp_dbt_tpl_count_w[], tp_dbt_tpl_count_n[];
extern const uint8_t tp_dbt_tpl_rep_post[], tp_dbt_tpl_rep_w[], tp_dbt_tpl_rep_w2[];

/* Is @pc in a copy of the template @tpl at @at bytes from its start?  The bytes before
 * the window are compared (no patched field is among them). */
static int in_template(uint64_t pc, const uint8_t *tpl, const uint8_t *at, const uint8_t *cmp_end)
{
	uint64_t start = pc - (uint64_t)(at - tpl);

	return tp_dbt_in_runtime(start) && tp_dbt_in_runtime(start + (uint64_t)(cmp_end - tpl)) &&
	       !memcmp((const void *)(uintptr_t)start, tpl, (size_t)(cmp_end - tpl));
}

/* The count is read, added to and stored back by several instructions: a handler that
 * interrupted them counted into the value they hold in a register, which would store
 * over its instructions.  That register gets them. */
static void count_fix(ucontext_t *uc, uint64_t delta)
{
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	greg_t *rax = &uc->uc_mcontext.gregs[REG_RAX], *rdx = &uc->uc_mcontext.gregs[REG_RDX];

	if (!delta)
		return;
	if (in_template(pc, tp_dbt_tpl_count, tp_dbt_tpl_count_w, tp_dbt_tpl_count_w) ||
	    in_template(pc, tp_dbt_tpl_count, tp_dbt_tpl_count_n, tp_dbt_tpl_count_w))
		*rax += (greg_t)delta;
	else if (in_template(pc, tp_dbt_tpl_rep_post, tp_dbt_tpl_rep_w, tp_dbt_tpl_rep_w))
		*rdx += (greg_t)delta;
	else if (in_template(pc, tp_dbt_tpl_rep_post, tp_dbt_tpl_rep_w2, tp_dbt_tpl_rep_w))
		*rax += (greg_t)delta;
}

/* rt_sigreturn with the frame at @rsp: the slots as the signal found them, and a resume
 * address in the cache even if the handler changed it to a program address. */
uint64_t tp_dbt_sig_return(uint64_t rsp)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	ucontext_t *uc = (ucontext_t *)(uintptr_t)rsp;
	greg_t *rip = &uc->uc_mcontext.gregs[REG_RIP];
	struct tp_dbt_saved *s = NULL;

	/* frames of handlers that longjmp'd out are dropped on the way */
	while (t->nsave > 0) {
		s = &t->save[--t->nsave];
		if (s->uc == rsp)
			break;
		s = NULL;
	}
	/* the pc the handler was shown: back where the signal came, in the cache; a pc it
	 * changed is the program's, translated */
	if (s && s->prog_pc && (uint64_t)*rip == s->prog_pc) {
		*rip = (greg_t)s->cache_pc;
	} else if (!tp_dbt_in_runtime((uint64_t)*rip)) {
		uint64_t to = tp_dbt_translate((uint64_t)*rip);

		if (to)
			*rip = (greg_t)to;
	}
	if (s) {
		t->rax = s->rax;
		t->rcx0 = s->rcx0;
		t->rdx = s->rdx;
		t->next = s->next;
		t->arg = s->arg;
		t->ibl_rcx = s->ibl_rcx;
		t->ibl_rdx = s->ibl_rdx;
		count_fix(uc, t->count - s->count);
	}
	/* it goes on there, whatever a flush does meanwhile */
	if (tp_dbt_in_runtime((uint64_t)*rip))
		tp_dbt_cache_pin(t, (uint64_t)*rip);
	tp_dbt_c_leave(t);
	tp_dbt_rt_sigreturn(rsp);
	return 0;
}

/* rt_sigaction of SIGSEGV while the runtime owns it: the kernel keeps the trampoline. */
static long segv_action(const struct tp_ksigaction *act, struct tp_ksigaction *oact, long size)
{
	struct tp_ksigaction old = segv.prog, k;
	uint64_t prev = handlers[SIGSEGV];
	long ret = 0;

	if (size != 8)
		return -EINVAL;
	if (act) {
		if (tp_rt_mem_read((uint64_t)(uintptr_t)act, &k, sizeof(k)))
			return -EFAULT;
		segv.prog = k;
		handlers[SIGSEGV] =
		    (uint64_t)(uintptr_t)k.handler > 1 ? (uint64_t)(uintptr_t)k.handler : 0;
		if (handlers[SIGSEGV]) {
			k.handler = (void *)&tp_dbt_rt_sigtramp;
			k.flags &= ~(unsigned long)SA_RESETHAND; /* emulated (segv_enter) */
			ret = tp_raw4(SYS_rt_sigaction, SIGSEGV, &k, NULL, 8);
		} else {
			ret = segv_ours();
		}
		if (ret) {
			segv.prog = old;
			handlers[SIGSEGV] = prev;
			return ret;
		}
	}
	if (oact && tp_rt_mem_write((uint64_t)(uintptr_t)oact, &old, sizeof(old)))
		return -EFAULT;
	return 0;
}

/* rt_sigaction(@sig, @act, @oact, @size) on the program's behalf: handlers are recorded and
 * the kernel is given the trampoline; the program reads back its own. */
long tp_dbt_sigaction(long sig, const struct tp_ksigaction *act, struct tp_ksigaction *oact,
		      long size)
{
	struct tp_ksigaction k;
	uint64_t prev;
	long ret;

	if (sig <= 0 || sig >= 65)
		return tp_raw4(SYS_rt_sigaction, sig, act, oact, size);
	if (sig == SIGSEGV && segv.own)
		return segv_action(act, oact, size);
	prev = handlers[sig];
	if (act) {
		k = *act;
		if ((uint64_t)(uintptr_t)k.handler > 1) {
			handlers[sig] = (uint64_t)(uintptr_t)k.handler;
			k.handler = (void *)&tp_dbt_rt_sigtramp;
		}
	}
	ret = tp_raw4(SYS_rt_sigaction, sig, act ? &k : NULL, oact, size);
	if (ret) {
		handlers[sig] = prev;
		return ret;
	}
	if (oact && oact->handler == (void *)&tp_dbt_rt_sigtramp)
		oact->handler = (void *)(uintptr_t)prev;
	return 0;
}

void tp_dbt_c_leave(struct tp_dbt_thread *t)
{
	siginfo_t si;

	tp_dbt_unlock();
	__atomic_store_n(&t->in_c, 0, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&t->npending, __ATOMIC_SEQ_CST))
		return;
	si = t->pending;
	t->npending = 0;
	/* delivered as this call returns, with its siginfo */
	tp_raw4(SYS_rt_tgsigqueueinfo, tp_raw0(SYS_getpid), tp_dbt_gettid(), si.si_signo, &si);
}
