/* The gate: what the runtime does before a program's system call runs in the cache, and
 * at the agent's two int3s.  System calls run natively in the cache after the gate; a
 * few need the runtime first (exit flushes the count) or are refused because the runtime
 * cannot follow them yet (threads, %gs). */
#include <errno.h>
#include <linux/sched.h>
#include <sys/syscall.h>
#include <asm/prctl.h>

#include "dbt/rt-priv.h"
#include "rt/raw.h"

/* The syscall instruction that follows the gate in the cache (rt-cache.c). */
#define SYSCALL_LEN 2

static void note(uint32_t state)
{
	if (tp_dbt.ctl)
		__atomic_or_fetch(&tp_dbt.ctl->state, state, __ATOMIC_RELAXED);
}

/* Skip the syscall: the program sees @ret as its result. */
static uint64_t refuse(uint64_t back, struct tp_dbt_frame *f, long ret)
{
	f->rax = (uint64_t)ret;
	return back + SYSCALL_LEN;
}

static uint64_t on_syscall(struct tp_dbt_thread *t, uint64_t back, struct tp_dbt_frame *f)
{
	long nr = (long)f->rax;
	uint64_t flags;

	/* a vfork child shares this block with its parent until it execs or exits: what it
	 * ran is not the parent's, as under the other engines */
	if (t->vfork_pending && tp_raw0(SYS_getpid) != tp_dbt.pid &&
	    (nr == SYS_execve || nr == SYS_execveat || nr == SYS_exit || nr == SYS_exit_group)) {
		t->count = t->vfork_count;
		t->vfork_pending = 0;
		return back;
	}
	switch (nr) {
	case SYS_exit:
	case SYS_exit_group:
		tp_dbt_flush(t);
		return back;
	case SYS_execve:
	case SYS_execveat:
		/* the new image is not taken over: what ran up to here is the count */
		tp_dbt_flush(t);
		note(TP_AGENT_ST_EXEC);
		return back;
	case SYS_vfork:
		t->vfork_count = t->count;
		t->vfork_pending = 1;
		note(TP_AGENT_ST_FORKED);
		return back;
	case SYS_fork:
		note(TP_AGENT_ST_FORKED);
		return back;
	case SYS_clone:
	case SYS_clone3:
		if (nr == SYS_clone3) {
			if (!f->rdi || f->rsi < 8)
				return back;
			flags = *(const uint64_t *)(uintptr_t)f->rdi;
		} else {
			flags = f->rdi;
		}
		if ((flags & CLONE_VM) && !(flags & CLONE_VFORK)) {
			tp_dbt_fail("the program started a thread: the dbt engine does not run "
				    "threads yet (clone refused with EAGAIN)",
				    0);
			/* clone3's ENOSYS sends glibc to clone, which then fails */
			return refuse(back, f, nr == SYS_clone3 ? -ENOSYS : -EAGAIN);
		}
		if (flags & CLONE_VFORK) {
			t->vfork_count = t->count;
			t->vfork_pending = 1;
		}
		note(TP_AGENT_ST_FORKED);
		return back;
	case SYS_munmap:
	case SYS_mprotect:
	case SYS_mremap:
		/* before the call: if it fails, only translations are lost */
		tp_dbt_invalidate(f->rdi, f->rdi + f->rsi);
		return back;
	case SYS_rt_sigaction:
		return refuse(back, f,
			      tp_dbt_sigaction((long)f->rdi, (const void *)(uintptr_t)f->rsi,
					       (void *)(uintptr_t)f->rdx, (long)f->r10));
	case SYS_rt_sigreturn:
		/* the frame is at the program's stack pointer; this does not return */
		return tp_dbt_sig_return((uint64_t)(uintptr_t)(f + 1) + 128);
	case SYS_arch_prctl:
		if (f->rdi == ARCH_SET_FS) {
			long ret = tp_raw2(SYS_arch_prctl, ARCH_SET_FS, f->rsi);

			if (!ret)
				tp_dbt.fs = f->rsi;
			return refuse(back, f, ret);
		}
		if (f->rdi == ARCH_SET_GS || f->rdi == ARCH_GET_GS) {
			tp_dbt_fail("the program uses %gs, which the dbt engine owns (arch_prctl "
				    "refused with EPERM)",
				    0);
			return refuse(back, f, -EPERM);
		}
		return back;
	default:
		return back;
	}
}

static uint64_t gate(struct tp_dbt_thread *t, uint64_t back, struct tp_dbt_frame *f)
{
	switch (t->arg) {
	case TP_DBT_GATE_SYNC:
		/* what the agent runs between its two int3s is counted by no engine */
		t->paused_at = t->count;
		t->paused = 1;
		return back;
	case TP_DBT_GATE_SYNC2:
		if (t->paused)
			t->count = t->paused_at;
		t->paused = 0;
		return back;
	default:
		return on_syscall(t, back, f);
	}
}

uint64_t tp_dbt_gate(uint64_t back, struct tp_dbt_frame *f)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	uint64_t to;

	tp_dbt_c_enter(t);
	to = gate(t, back, f);
	tp_dbt_c_leave(t);
	return to;
}
