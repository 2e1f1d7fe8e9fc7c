/* Guarded reads of the process's own memory without a system call, for jump pads'
 * callbacks: a plain copy whose SIGSEGV or SIGBUS a handler turns into -EFAULT (the
 * kernel's exception table, in user space).  Apart from mem.c, which the code cache's
 * runtime also builds without the SIGTRAP dispatcher's restorer. */
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "rt/raw.h"
#include "rt/rt.h"

/* ---- guarded reads: a plain copy whose fault is caught (the kernel's exception table) ----
 *
 * A jump pad's callback must read the program's memory at tens of nanoseconds, so not with
 * a system call.  tp_rt_mem_copy_guarded's only loads are one mov (8 bytes) or one `rep movsb`; a
 * SIGSEGV or SIGBUS raised there is taken by the guard's handler, which resumes at the fixup
 * (returning -EFAULT).  Any other fault goes to what the program had installed: its handler is
 * called, or its default action is put back and the instruction faults again. */
__asm__(".text\n"
	".p2align 4\n"
	".globl tp_rt_mem_copy_guarded\n"
	".hidden tp_rt_mem_copy_guarded\n"
	".type tp_rt_mem_copy_guarded, @function\n"
	"tp_rt_mem_copy_guarded:\n"
	"\tcmp $8, %rdx\n"
	"\tjne 1f\n"
	".globl tp_rt_mem_copy_insn8\n"
	".hidden tp_rt_mem_copy_insn8\n"
	"tp_rt_mem_copy_insn8:\n"
	"\tmov (%rsi), %rax\n"
	"\tmov %rax, (%rdi)\n"
	"\txor %eax, %eax\n"
	"\tret\n"
	"1:\n"
	"\tmov %rdx, %rcx\n"
	"\tcld\n"
	".globl tp_rt_mem_copy_insn\n"
	".hidden tp_rt_mem_copy_insn\n"
	"tp_rt_mem_copy_insn:\n"
	"\trep movsb\n"
	"\txor %eax, %eax\n"
	"\tret\n"
	".globl tp_rt_mem_copy_fixup\n"
	".hidden tp_rt_mem_copy_fixup\n"
	"tp_rt_mem_copy_fixup:\n"
	"\tmov $-14, %eax\n"
	"\tret\n"
	".size tp_rt_mem_copy_guarded, .-tp_rt_mem_copy_guarded\n");
int tp_rt_mem_copy_guarded(void *dst, const void *src, size_t len) TP_RT_HIDDEN;
extern const char tp_rt_mem_copy_insn[] TP_RT_HIDDEN, tp_rt_mem_copy_fixup[] TP_RT_HIDDEN,
    tp_rt_mem_copy_insn8[] TP_RT_HIDDEN;

static struct tp_ksigaction guard_old[2]; /* SIGSEGV, SIGBUS: the program's */
static int guard_on;

/* The text of the object this is linked into (the agent): its own rdtsc instructions. */
extern const char __ehdr_start[] TP_RT_HIDDEN, etext[] TP_RT_HIDDEN;

/* A thread that forbade rdtsc (prctl PR_SET_TSC, PR_TSC_SIGSEGV) faults at the agent's own
 * time stamps: the counter is read for it, allowed for that instant only, and the thread
 * goes on with rdtsc forbidden as it asked.  The program's own rdtsc still faults. */
static int own_rdtsc(const siginfo_t *si, greg_t *g)
{
	const unsigned char *pc = (const unsigned char *)(uintptr_t)g[REG_RIP];
	uint32_t lo, hi;

	if (si->si_code != SI_KERNEL || (const char *)pc < __ehdr_start ||
	    (const char *)pc + 2 > etext || pc[0] != 0x0f || pc[1] != 0x31)
		return 0;
	if (tp_raw2(SYS_prctl, PR_SET_TSC, PR_TSC_ENABLE))
		return 0;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	tp_raw2(SYS_prctl, PR_SET_TSC, PR_TSC_SIGSEGV);
	g[REG_RAX] = lo;
	g[REG_RDX] = hi;
	g[REG_RIP] += 2;
	return 1;
}

static void guard_handler(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	greg_t *g = uc->uc_mcontext.gregs;
	struct tp_ksigaction *old = &guard_old[sig == SIGBUS];

	if (si->si_code > 0 &&
	    ((uint64_t)g[REG_RIP] == (uint64_t)(uintptr_t)tp_rt_mem_copy_insn ||
	     (uint64_t)g[REG_RIP] == (uint64_t)(uintptr_t)tp_rt_mem_copy_insn8)) {
		g[REG_RIP] = (greg_t)(uintptr_t)tp_rt_mem_copy_fixup;
		return;
	}
	if (sig == SIGSEGV && own_rdtsc(si, g))
		return;
	if (old->handler == SIG_DFL || old->handler == SIG_IGN || (old->flags & SA_RESETHAND)) {
		/* the program's action from now on: the fault comes again and takes it */
		struct tp_ksigaction dfl = *old;

		if (old->flags & SA_RESETHAND)
			dfl.handler = SIG_DFL;
		tp_raw4(SYS_rt_sigaction, sig, &dfl, NULL, 8);
		if (old->handler == SIG_DFL || old->handler == SIG_IGN)
			return;
	}
	if (old->flags & SA_SIGINFO)
		((void (*)(int, siginfo_t *, void *))old->handler)(sig, si, ucv);
	else
		((void (*)(int))old->handler)(sig);
}

int tp_rt_mem_guard_install(void)
{
	static const int sigs[2] = {SIGSEGV, SIGBUS};
	struct tp_ksigaction sa = {0}, cur;

	if (guard_on)
		return 0;
	sa.handler = (void *)guard_handler;
	sa.flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | TP_SA_RESTORER;
	sa.restorer = (void *)tp_rt_restore_rt;
	for (int i = 0; i < 2; i++) {
		long r = tp_raw4(SYS_rt_sigaction, sigs[i], &sa, &cur, 8);

		if (r) {
			if (i)
				tp_raw4(SYS_rt_sigaction, SIGSEGV, &guard_old[0], NULL, 8);
			return (int)r;
		}
		guard_old[i] = cur;
	}
	__atomic_store_n(&guard_on, 1, __ATOMIC_RELEASE);
	return 0;
}

void tp_rt_mem_guard_remove(void)
{
	static const int sigs[2] = {SIGSEGV, SIGBUS};

	if (!guard_on)
		return;
	__atomic_store_n(&guard_on, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++) {
		struct tp_ksigaction cur;

		/* only where it is still ours: the program may have installed its own since */
		if (!tp_raw4(SYS_rt_sigaction, sigs[i], NULL, &cur, 8) &&
		    cur.handler == (void *)guard_handler)
			tp_raw4(SYS_rt_sigaction, sigs[i], &guard_old[i], NULL, 8);
	}
}

int tp_rt_mem_read_fast(uint64_t addr, void *buf, size_t len)
{
	if (addr + len < addr)
		return -EFAULT;
	if (__atomic_load_n(&guard_on, __ATOMIC_ACQUIRE))
		return tp_rt_mem_copy_guarded(buf, (const void *)(uintptr_t)addr, len);
	return tp_rt_mem_read(addr, buf, len);
}
