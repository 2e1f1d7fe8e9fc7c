/* The ptrace engine of `tracepad count`, its side that touches the program beyond stepping
 * it: its few breakpoints, the stepping of threads that block SIGTRAP, and leaving the
 * program as it was (at detach, and from the crash guard). */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include "arch/arch.h"
#include "bp/bp.h"
#include "count/ptrace-priv.h"
#include "proc/guard.h"

int tp_cpt_bp_write(struct engine *e, struct tp_abp_ptrace *bp, bool on)
{
	return tp_proc_poke_int3(e->pid, bp->addr, on, bp->orig);
}

int tp_cpt_bp_insert(struct engine *e, uint64_t addr, enum bp_kind kind)
{
	struct tp_abp_ptrace *bp;

	if (e->nbps >= 4)
		return -ENOSPC;
	bp = &e->bps[e->nbps];
	if (tp_proc_read(e->pid, addr, &bp->orig, 1) != 1)
		return -EFAULT;
	bp->addr = addr;
	bp->kind = kind;
	if (tp_cpt_bp_write(e, bp, true))
		return -EFAULT;
	bp->live = true;
	e->nbps++;
	return 0;
}

struct tp_abp_ptrace *tp_cpt_bp_at(struct engine *e, uint64_t addr)
{
	for (int i = 0; i < e->nbps; i++)
		if (e->bps[i].live && e->bps[i].addr == addr)
			return &e->bps[i];
	return NULL;
}

/* Every original byte goes back before the program is let go. */
static void bp_remove_all(struct engine *e)
{
	for (int i = 0; i < e->nbps; i++)
		if (e->bps[i].live && !tp_cpt_bp_write(e, &e->bps[i], false))
			e->bps[i].live = false;
}

/* The stop of a thread that stepped with SIGTRAP unblocked: its own mask back. */
void tp_cpt_mask_back(struct pthread *t)
{
	if (t->unblocked && !tp_proc_set_sigmask(t->tid, t->mask))
		t->unblocked = false;
}

static int thread_mask_back(void *arg, uint64_t tid, uint64_t *v)
{
	(void)arg, (void)tid;
	tp_cpt_mask_back((struct pthread *)(uintptr_t)*v);
	return 0;
}

/* A launched program left before the agent's syncs (an interrupt, an error) must not run
 * into their int3s untraced: SIGTRAP would kill it.  Every thread is stopped: the flags go,
 * and the int3s the agent may already have decided to run (it publishes their addresses
 * before it reads the flags) become no-ops. */
static void disarm_agent(struct engine *e)
{
	struct tp_agent_ctl *ctl = e->c->ctl;
	const uint8_t nop = TP_ARCH_NOP1;
	uint64_t pcs[2];

	if (!ctl)
		return;
	__atomic_and_fetch(&ctl->flags, ~(uint32_t)(TP_CTL_SYNC | TP_CTL_SYNC2), __ATOMIC_SEQ_CST);
	pcs[0] = __atomic_load_n(&ctl->sync_pc, __ATOMIC_SEQ_CST);
	pcs[1] = __atomic_load_n(&ctl->sync2_pc, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 2; i++) {
		uint8_t b;

		if (pcs[i] && tp_proc_read(e->pid, pcs[i], &b, 1) == 1 && b == TP_ARCH_INT3)
			tp_proc_write(e->pid, pcs[i], &nop, 1);
	}
}

/* Leave the program as it was: every thread stopped, one that trapped on a breakpoint of ours
 * put back on the breakpoint's instruction, the original bytes restored, then detached. */
void tp_cpt_detach(struct engine *e)
{
	struct tp_event ev;
	size_t i = 0;

	tp_proc_stop_all(e->proc, 0);
	for (;;) {
		struct user_regs_struct regs;

		if (i < e->ndeferred)
			ev = e->deferred[i++];
		else if (tp_proc_wait(e->proc, &ev))
			break; /* nothing queued and nothing running (-EDEADLK), or all gone */
		if (ev.kind != TP_EV_BREAKPOINT || tp_proc_get_regs(ev.tid, &regs))
			continue;
		if (tp_cpt_bp_at(e, regs.rip - 1)) {
			regs.rip--;
			tp_proc_set_regs(ev.tid, &regs);
		}
	}
	e->ndeferred = 0;
	bp_remove_all(e);
	tp_hash_foreach(&e->threads, thread_mask_back, NULL);
	disarm_agent(e);
	tp_proc_detach(e->proc);
	e->proc = NULL;
}

/* If tracepad itself crashes, src/proc's guard stops every thread and calls this before it
 * detaches them: a thread just past one of our int3s goes back to it, the bytes go back. */
static void restore_on_crash(void *arg)
{
	struct engine *e = arg;
	struct user_regs_struct regs;
	pid_t tids[1024];
	int n = tp_proc_tasks(e->proc, tids, 1024);

	for (int i = 0; i < n && i < 1024; i++) {
		if (!tp_proc_get_regs(tids[i], &regs) && tp_cpt_bp_at(e, regs.rip - 1))
			tp_proc_set_pc(tids[i], regs.rip - 1);
	}
	bp_remove_all(e);
	tp_hash_foreach(&e->threads, thread_mask_back, NULL);
}

void tp_cpt_catch_fatal(struct engine *e)
{
	tp_proc_guard_set("tracepad count", restore_on_crash, e);
}

#define TRAP_BIT (1ull << (SIGTRAP - 1))

/* Syscalls that change the signal mask: run to their exit stop rather than stepped. */
static bool changes_mask(uint64_t nr)
{
	switch (nr) {
	case SYS_rt_sigprocmask:
	case SYS_rt_sigreturn:
	case SYS_rt_sigsuspend:
	case SYS_pselect6:
	case SYS_ppoll:
	case SYS_epoll_pwait:
	case SYS_epoll_pwait2:
	case SYS_io_pgetevents:
		return true;
	}
	return false;
}

/* Resume @t for its instruction of kind @kind.  The trap of a single step is a forced
 * SIGTRAP, and the kernel resets the SIGTRAP handler of a thread that blocks SIGTRAP to
 * SIG_DFL when it forces one (inside the program's own SIGTRAP handler, say): its next trap
 * would kill it.  So while SIGTRAP is blocked, the thread steps with it unblocked (the mask
 * goes back at the stop, before anything else), and a syscall that may read or change the
 * mask runs to its syscall-exit stop, a ptrace report rather than a trap. */
int tp_cpt_step(struct engine *e, struct pthread *t, unsigned kind)
{
	struct user_regs_struct regs;
	int err;

	if (t->mask_check && !tp_proc_get_sigmask(t->tid, &t->mask))
		t->mask_check = false;
	/* (a step over one of our breakpoints, with the other threads stopped, stays a step:
	 * on_step() puts the breakpoint back) */
	if (kind == TP_INSN_SYSCALL && !t->over) {
		bool blocked = !t->mask_check && (t->mask & TRAP_BIT);

		t->mask_check = true;
		if (blocked || (!tp_proc_get_regs(t->tid, &regs) && changes_mask(regs.rax))) {
			t->in_syscall = 1;
			return tp_proc_resume(e->proc, t->tid, TP_RESUME_SYSCALL, 0);
		}
		return tp_proc_resume(e->proc, t->tid, TP_RESUME_STEP, 0);
	}
	if (!t->mask_check && (t->mask & TRAP_BIT)) {
		err = tp_proc_set_sigmask(t->tid, t->mask & ~TRAP_BIT);
		if (err)
			return err;
		t->unblocked = true;
	}
	return tp_proc_resume(e->proc, t->tid, TP_RESUME_STEP, 0);
}
