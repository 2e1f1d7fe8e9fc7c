/* The gate: what the runtime does before a program's system call runs in the cache.  System
 * calls run natively in the cache after the gate; a few need the runtime first (exit flushes
 * the count, a thread starts with its own block) or are refused because the runtime cannot
 * follow them (%gs). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <asm/prctl.h>

#include "dbt/rt-client.h"
#include "dbt/rt-priv.h"
#include "rt/raw.h"
#include "rt/rt.h"

/* The syscall instruction that follows the gate in the cache (rt-cache.c). */
#define SYSCALL_LEN 2

static void note(uint32_t state)
{
	if (tp_dbt.ctl)
		__atomic_or_fetch(&tp_dbt.ctl->state, state, __ATOMIC_RELAXED);
}

/* Skip the syscall: the program sees @ret as its result (r11 as the kernel leaves it). */
static uint64_t refuse(uint64_t back, struct tp_dbt_frame *f, long ret)
{
	f->rax = (uint64_t)ret;
	f->r11 = f->rflags;
	return back + SYSCALL_LEN;
}

/* A forked child copies the cache it shares with its parent (tp_dbt_cache_forked): the
 * parent writes none meanwhile, waiting for the child's word in a page both share. */
static uint32_t *fork_sync_new(void)
{
	long at =
	    tp_raw6(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return tp_raw_failed(at) ? NULL : (uint32_t *)(uintptr_t)at;
}

static void fork_sync_wait(uint32_t *w, long child)
{
	struct timespec ts = {0, 10 * 1000 * 1000};

	if (!w)
		return;
	/* a child killed before it copied does not hold the parent up */
	while (child > 0 && !__atomic_load_n(w, __ATOMIC_ACQUIRE) && !tp_raw2(SYS_kill, child, 0))
		tp_raw4(SYS_futex, w, FUTEX_WAIT, 0, &ts);
	tp_raw2(SYS_munmap, w, 4096);
}

void tp_dbt_fork_sync_done(uint32_t *w, uint64_t resume)
{
	tp_dbt_cache_forked();
	/* a debugger that follows the child takes it where it goes on (src/debug) */
	if (tp_dbt.boot->flags & TP_DBT_BOOT_BREAK_FORKED) {
		tp_dbt.boot->flags &= ~TP_DBT_BOOT_BREAK_FORKED;
		tp_dbt_map_break(tp_dbt_map_program_pc(resume));
	}
	if (!w)
		return;
	__atomic_store_n(w, 1, __ATOMIC_RELEASE);
	tp_raw3(SYS_futex, w, FUTEX_WAKE, 1);
	tp_raw2(SYS_munmap, w, 4096);
}

/* clone or clone3 for a new thread, whose first code is tp_dbt_thread_start(@nt) on its
 * start-up stack (in @nt's mapping; r12 carries @nt across into the child). */
static long clone_raw(long nr, long a, long b, long c, long d, long e, struct tp_dbt_thread *nt)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r12 __asm__("r12") = (long)(uintptr_t)nt;
	long ret;

	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "mov %%r12, %%rdi\n\t"
			 "call tp_dbt_thread_start\n\t"
			 "ud2\n"
			 "1:"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r12)
			 : "rcx", "r11", "memory");
	return ret;
}

/* A thread (clone with CLONE_VM, without CLONE_VFORK) starts in the cache with a block of
 * its own: the runtime makes the call with a stack of its own for the child, which sets
 * its %gs, then takes the program's registers and stack and goes on after the syscall.
 * Signals stay blocked in both until each is back in a consistent state. */
static uint64_t clone_thread(struct tp_dbt_thread *t, uint64_t back, struct tp_dbt_frame *f,
			     long nr, uint64_t flags)
{
	uint64_t all = ~0ull, sp = f->rsp, top;
	struct clone_args args = {0};
	struct tp_dbt_thread *nt = tp_dbt_thread_new();
	long ret;

	if (!nt) {
		tp_dbt_fail("no memory for a new thread's block", 0);
		return refuse(back, f, -EAGAIN);
	}
	top = (uint64_t)(uintptr_t)nt & ~15ull;
	if (nr == SYS_clone3) {
		memcpy(&args, (const void *)(uintptr_t)f->rdi,
		       f->rsi < sizeof(args) ? f->rsi : sizeof(args));
		if (args.stack)
			sp = args.stack + args.stack_size;
		args.stack = (uint64_t)(uintptr_t)nt - TP_DBT_T_STACK_SIZE;
		args.stack_size = top - args.stack;
		nt->fs = flags & CLONE_SETTLS ? args.tls : t->fs;
		nt->tcb_in = flags & CLONE_SETTLS ? 0 : t->tcb_in;
	} else {
		if (f->rsi)
			sp = f->rsi;
		nt->fs = flags & CLONE_SETTLS ? f->r8 : t->fs;
		nt->tcb_in = flags & CLONE_SETTLS ? 0 : t->tcb_in;
	}
	nt->regs = (struct tp_dbt_regs){.r15 = f->r15,
					.r14 = f->r14,
					.r13 = f->r13,
					.r12 = f->r12,
					.rbp = f->rbp,
					.rbx = f->rbx,
					.r11 = f->rflags,
					.r10 = f->r10,
					.r9 = f->r9,
					.r8 = f->r8,
					.rax = 0,
					.rcx = f->rcx,
					.rdx = f->rdx,
					.rsi = f->rsi,
					.rdi = f->rdi,
					.eflags = f->rflags,
					.rsp = sp};
	nt->entry = back + SYSCALL_LEN;
	tp_dbt_cache_pin(nt, nt->entry);
	nt->forked = !(flags & CLONE_VM);
	nt->prog_ss = t->prog_ss;
	if (nt->forked) {
		nt->sync = fork_sync_new();
		note(TP_AGENT_ST_FORKED);
	} else
		tp_dbt_slot(nt);
	tp_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &nt->mask, 8);
	if (nr == SYS_clone3)
		ret = clone_raw(nr, (long)&args, sizeof(args), 0, 0, 0, nt);
	else
		ret = clone_raw(nr, (long)flags, (long)top, (long)f->rdx, (long)f->r10, (long)f->r8,
				nt);
	tp_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &nt->mask, NULL, 8);
	if (nt->forked)
		fork_sync_wait(nt->sync, ret);
	if (ret > 0)
		nt->tid = (int32_t)ret;
	if (ret <= 0 || nt->forked)
		nt->dead = 1; /* never started, or not in this process */
	return refuse(back, f, ret);
}

/* fork (clone without CLONE_VM, on the same stack) is made here, with the runtime's lock
 * held: the child's copy of the lock is then released by the child itself, whatever other
 * threads of the parent were doing. */
static uint64_t fork_here(uint64_t back, struct tp_dbt_frame *f, long nr)
{
	uint32_t *sync = fork_sync_new();
	long ret;

	if (nr == SYS_clone3)
		ret = tp_raw2(nr, f->rdi, f->rsi);
	else if (nr == SYS_clone)
		ret = tp_raw6(nr, f->rdi, f->rsi, f->rdx, f->r10, f->r8, f->r9);
	else
		ret = tp_raw0(nr);
	if (!ret)
		tp_dbt_fork_sync_done(sync, back + SYSCALL_LEN);
	else
		fork_sync_wait(sync, ret);
	note(TP_AGENT_ST_FORKED);
	return refuse(back, f, ret);
}

/* ---- execve, followed ---- */

/* May tracepad attach for the execve of @f?  1: yes; 0: not when the image gains privileges
 * (setuid, setgid, file capabilities: under ptrace the kernel would run it without them);
 * -1: there is no regular file to run (the call fails as natively, nothing to follow). */
static int exec_plain(struct tp_dbt_frame *f, long nr)
{
	struct stat st;
	long dirfd = AT_FDCWD, flags = 0, r;
	uint64_t path = f->rdi;
	char cap[8];

	if (nr == SYS_execveat) {
		dirfd = (long)(int)f->rdi;
		path = f->rsi;
		flags = (long)(int)f->r8 & (AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	}
	if (tp_raw4(SYS_newfstatat, dirfd, path, &st, flags) || !S_ISREG(st.st_mode))
		return -1;
	if (st.st_mode & (S_ISUID | S_ISGID))
		return 0;
	if ((flags & AT_EMPTY_PATH) && dirfd != AT_FDCWD)
		r = tp_raw4(SYS_fgetxattr, dirfd, "security.capability", cap, sizeof(cap));
	else if (dirfd == AT_FDCWD)
		r = tp_raw4(SYS_getxattr, path, "security.capability", cap, sizeof(cap));
	else
		return 0; /* relative to a directory fd: no getxattr for it, taken as privileged */
	return r == -ENODATA || r == -ENOTSUP;
}

/* Ask tracepad to attach for an execve of thread @t (the counted process's): 1 once it
 * has, 0 when it refused, is gone or did not answer within 5 s. */
static int exec_ask(struct tp_agent_ctl *ctl, struct tp_dbt_thread *t)
{
	struct timespec ts = {0, 10 * 1000 * 1000};
	int32_t ack = 0;

	__atomic_store_n(&ctl->exec_ack, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->exec_failed, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ctl->exec_tid, t->tid, __ATOMIC_RELEASE);
	tp_raw3(SYS_futex, &ctl->exec_tid, FUTEX_WAKE, 1);
	for (int i = 0; i < 500; i++) {
		ack = __atomic_load_n(&ctl->exec_ack, __ATOMIC_ACQUIRE);
		if (ack || tp_raw2(SYS_kill, ctl->tracer_pid, 0) == -ESRCH)
			break;
		tp_raw4(SYS_futex, &ctl->exec_ack, FUTEX_WAIT, 0, &ts);
	}
	__atomic_store_n(&ctl->exec_tid, 0, __ATOMIC_RELEASE);
	return ack == t->tid;
}

/* execve of the counted process: with tracepad attached for it, made here, so that
 * tracepad takes the new image over at its exec stop as it took the first (the count goes
 * on there); a call that fails returns as natively, and tracepad lets go.  Else the call
 * runs in the cache after the gate, as every system call (the runtime's lock let go: a
 * vfork child's would be its parent's), and the new image natively: what ran up to here is
 * the count.  A forked child's execve (not counted) and one of no file are not noted. */
static uint64_t exec_here(struct tp_dbt_thread *t, uint64_t back, struct tp_dbt_frame *f, long nr)
{
	struct tp_agent_ctl *ctl = tp_dbt.ctl;
	int plain;
	long ret;

	if (!ctl || tp_raw0(SYS_getpid) != tp_dbt.pid || (plain = exec_plain(f, nr)) < 0)
		return back;
	if (!plain || !ctl->exec_follow || ctl->tracer_pid <= 0 || !exec_ask(ctl, t)) {
		note(TP_AGENT_ST_EXEC);
		return back;
	}
	note(TP_AGENT_ST_EXEC_FOLLOWED);
	if (nr == SYS_execveat)
		ret = tp_raw6(nr, f->rdi, f->rsi, f->rdx, f->r10, f->r8, 0);
	else
		ret = tp_raw3(nr, f->rdi, f->rsi, f->rdx);
	/* still here: the call failed */
	__atomic_store_n(&ctl->exec_failed, 1, __ATOMIC_RELEASE);
	tp_raw3(SYS_futex, &ctl->exec_tid, FUTEX_WAKE, 1);
	return refuse(back, f, ret);
}

/* tp_dbt_smc_open() for each buffer of an iovec array the kernel writes into. */
static void smc_open_iov(uint64_t iov, uint64_t n)
{
	for (uint64_t i = 0; i < n && i < 1024; i++) {
		uint64_t v[2];

		if (tp_rt_mem_read(iov + 16 * i, v, sizeof(v)))
			return;
		tp_dbt_smc_open(v[0], v[1]);
	}
}

/* The program sets %gs, which cache code needs: if this is its only thread, it leaves the
 * cache for good and runs natively from its syscall on (the counts so far are in, marked);
 * returns otherwise. */
static void leave_cache(struct tp_dbt_thread *t, uint64_t back, struct tp_dbt_frame *f)
{
	uint64_t next = tp_dbt_map_program_pc(back + SYSCALL_LEN);

	for (struct tp_dbt_thread *o = tp_dbt.threads; o; o = o->link)
		if (o != t && !o->dead && tp_raw3(SYS_tgkill, tp_dbt.pid, o->tid, 0) != -ESRCH)
			return;
	if (!next || t->nsave || t->vfork_pending)
		return;
	tp_dbt_flush_all();
	tp_dbt_fail("the program sets %gs (which the dbt engine owns) and runs natively from its "
		    "arch_prctl on,",
		    next);
	/* what the runtime changed for the program, given back */
	tp_dbt_smc_forget(0, 1ull << 47);
	tp_dbt_sig_native();
	if (t->tcb_in)
		tp_raw2(SYS_arch_prctl, ARCH_SET_FS, 0);
	/* as after a syscall: rcx the next pc, r11 the flags */
	f->rcx = next;
	f->r11 = f->rflags;
	tp_dbt_c_leave(t);
	tp_dbt_rt_leave(f, f->rsi);
}

static uint64_t on_syscall(struct tp_dbt_thread *t, uint64_t back, struct tp_dbt_frame *f)
{
	long nr = (long)f->rax;
	uint64_t flags, stack;

	/* a vfork child shares this block with its parent until it execs or exits: what it
	 * ran is not the parent's, as under the other engines.  Every execve it tries takes its
	 * count out (execvp tries each PATH entry: a failed one goes on in the child); the
	 * parent, back, is the one to end the vfork. */
	if (t->vfork_pending && tp_raw0(SYS_getpid) != tp_dbt.pid &&
	    (nr == SYS_execve || nr == SYS_execveat || nr == SYS_exit || nr == SYS_exit_group)) {
		tp_dbt_count_set(t, t->vfork_count);
		tp_dbt_client_vfork(t, 1);
		return back;
	}
	if (t->vfork_pending && tp_raw0(SYS_getpid) == tp_dbt.pid)
		t->vfork_pending = 0;
	{
		uint64_t args[6] = {f->rdi, f->rsi, f->rdx, f->r10, f->r8, f->r9};

		tp_dbt_smc_open_args(args, 6);
	}
	switch (nr) {
	case SYS_exit:
		t->exiting = 1;
		tp_dbt_flush(t);
		return back;
	case SYS_exit_group:
		tp_dbt_flush_all();
		return back;
	case SYS_execve:
	case SYS_execveat:
		tp_dbt_flush_all();
		return exec_here(t, back, f, nr);
	case SYS_vfork:
		t->vfork_pin = back;
		t->vfork_count = tp_dbt_count(t);
		tp_dbt_client_vfork(t, 0);
		t->vfork_pending = 1;
		note(TP_AGENT_ST_FORKED);
		return back;
	case SYS_fork:
		return fork_here(back, f, nr);
	case SYS_clone:
	case SYS_clone3:
		if (nr == SYS_clone3) {
			struct clone_args a = {0};

			if (!f->rdi || f->rsi < 64 || tp_rt_mem_read(f->rdi, &a, 64))
				return back; /* the kernel says why */
			flags = a.flags;
			stack = a.stack;
		} else {
			flags = f->rdi;
			stack = f->rsi;
		}
		/* a process on a stack of its own starts as a thread does, and then takes a
		 * copy of the cache as fork does */
		if (!(flags & CLONE_VM) && !stack)
			return fork_here(back, f, nr);
		if (!(flags & CLONE_VFORK) || !(flags & CLONE_VM))
			return clone_thread(t, back, f, nr, flags);
		if (flags & CLONE_VFORK) {
			t->vfork_pin = back;
			t->vfork_count = tp_dbt_count(t);
			tp_dbt_client_vfork(t, 0);
			t->vfork_pending = 1;
		}
		note(TP_AGENT_ST_FORKED);
		return back;
	case SYS_mmap:
		/* elsewhere, a new mapping changes none known (rt-smc.c looks new ones up) */
		if (!(f->r10 & (MAP_FIXED | MAP_FIXED_NOREPLACE)))
			return back;
		/* a fixed mapping replaces what was there */
		__attribute__((fallthrough));
	case SYS_munmap:
	case SYS_mprotect:
	case SYS_pkey_mprotect:
		/* before the call: if it fails, only translations are lost */
		tp_dbt_invalidate(f->rdi, f->rdi + f->rsi);
		tp_dbt_client_unmap(f->rdi, f->rdi + f->rsi);
		tp_dbt_smc_forget(f->rdi, f->rsi);
		return back;
	case SYS_mremap:
		tp_dbt_invalidate(f->rdi, f->rdi + f->rsi);
		tp_dbt_client_unmap(f->rdi, f->rdi + f->rsi);
		tp_dbt_smc_forget(f->rdi, f->rsi);
		if (f->r10 & MREMAP_FIXED) {
			tp_dbt_invalidate(f->r8, f->r8 + f->rdx);
			tp_dbt_client_unmap(f->r8, f->r8 + f->rdx);
			tp_dbt_smc_forget(f->r8, f->rdx);
		}
		return back;
	case SYS_read:
	case SYS_pread64:
	case SYS_recvfrom:
		/* the kernel writes there: a page guarded for written code must take it (its
		 * write would fail with EFAULT, not fault) */
		tp_dbt_smc_open(f->rsi, f->rdx);
		return back;
	case SYS_getrandom:
		tp_dbt_smc_open(f->rdi, f->rsi);
		return back;
	case SYS_readv:
	case SYS_preadv:
	case SYS_preadv2:
		smc_open_iov(f->rsi, f->rdx);
		return back;
	case SYS_rt_sigaction:
		return refuse(back, f,
			      tp_dbt_sigaction((long)f->rdi, (const void *)(uintptr_t)f->rsi,
					       (void *)(uintptr_t)f->rdx, (long)f->r10));
	case SYS_sigaltstack:
		return refuse(back, f, tp_dbt_sigaltstack(t, f->rdi, f->rsi, f->rsp));
	case SYS_rt_sigreturn:
		/* the frame is at the program's stack pointer; this does not return */
		return tp_dbt_sig_return(f->rsp);
	case SYS_arch_prctl:
		if (f->rdi == ARCH_SET_FS) {
			long ret = tp_raw2(SYS_arch_prctl, ARCH_SET_FS, f->rsi);

			if (!ret) {
				t->fs = f->rsi;
				t->tcb_in = 0;
			}
			return refuse(back, f, ret);
		}
		if (f->rdi == ARCH_GET_FS && !t->fs && t->tcb_in) {
			uint64_t zero = 0; /* the runtime's TCB stands in for none */

			return refuse(back, f, tp_rt_mem_write(f->rsi, &zero, 8));
		}
		if (f->rdi == ARCH_GET_GS) {
			uint64_t zero = 0; /* the program never set it: see ARCH_SET_GS */

			return refuse(back, f, tp_rt_mem_write(f->rsi, &zero, 8));
		}
		if (f->rdi == ARCH_SET_GS) {
			leave_cache(t, back, f);
			/* other threads run in the cache: it cannot be left */
			tp_dbt_fail("the program sets %gs, which the dbt engine owns, with other "
				    "threads running (arch_prctl refused with EPERM)",
				    0);
			return refuse(back, f, -EPERM);
		}
		return back;
	default:
		return back;
	}
}

/* The ud2 at @back stands for bytes the decoder does not know: the program gets SIGILL.  If
 * that kills it, the counts so far are in, with why (a CPU that knows them would go on). */
static void undecodable(uint64_t back)
{
	uint64_t mask = 0, pc = tp_dbt_map_program_pc(back);

	tp_raw4(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &mask, 8);
	if (tp_dbt_sig_handler(SIGILL) && !(mask & (1ull << (SIGILL - 1))))
		return;
	tp_dbt_flush_all();
	tp_dbt_fail("the decoder does not know an instruction: the program got SIGILL (as on a "
		    "CPU that does not know it either)",
		    pc);
}

uint64_t tp_dbt_gate(uint64_t back, struct tp_dbt_frame *f)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	uint64_t to;

	tp_dbt_c_enter(t);
	/* the thread goes on there, whatever a flush does meanwhile (rt-chunk.c) */
	tp_dbt_cache_pin(t, back);
	if (t->arg & TP_DBT_GATE_CLIENT) {
		to = tp_dbt_client_call(t, back, f);
	} else if (t->arg == TP_DBT_GATE_UNDECODABLE) {
		undecodable(back);
		to = back;
	} else {
		to = on_syscall(t, back, f);
	}
	t->next = to; /* where a signal from here on shows the program (rt-signal.c) */
	tp_dbt_c_leave(t);
	return to;
}
