/* The x86-64 Linux ABI facts tracepad relies on, in one place: how system calls and function
 * calls take their arguments, the kernel's syscall-restart codes, the red zone, and the
 * dynamic loader's r_debug/link_map layout.  Reached through arch/arch.h. */
#ifndef TP_ARCH_X86_64_ABI_H
#define TP_ARCH_X86_64_ABI_H

#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/user.h>

/* Below %rsp, 128 bytes leaf functions may use without moving %rsp: code entered from the
 * middle of a function moves %rsp past it first. */
#define TP_ARCH_RED_ZONE 128
/* At a function's first instruction, (%rsp + 8) is a multiple of this. */
#define TP_ARCH_STACK_ALIGN 16
/* EFLAGS.TF: the CPU traps after each instruction while it is set. */
#define TP_ARCH_EFLAGS_TF 0x100ull

/*
 * Kernel-internal return values (include/linux/errno.h) that a tracer sees in rax at a
 * syscall-exit stop of an interrupted syscall; they never reach the program.  The kernel
 * restarts the syscall on the way out unless a handler runs (and for ERESTARTSYS, unless the
 * handler lacks SA_RESTART); ERESTART_RESTARTBLOCK restarts as restart_syscall.
 */
#define TP_ARCH_ERESTARTSYS 512
#define TP_ARCH_ERESTARTNOINTR 513
#define TP_ARCH_ERESTARTNOHAND 514
#define TP_ARCH_ERESTART_RESTARTBLOCK 516

#define TP_ARCH_SYSCALL_NARGS 6 /* in registers: rdi rsi rdx r10 r8 r9 */
#define TP_ARCH_CALL_NARGS 6	/* integer arguments in registers: rdi rsi rdx rcx r8 r9 */

/* A system call from a stopped thread's registers: number in rax, arguments in rdi, rsi,
 * rdx, r10, r8, r9 (r10, not rcx: syscall overwrites rcx and r11).  orig_rax = -1 keeps the
 * kernel from restarting whatever the thread was stopped in. */
static inline void tp_arch_regs_set_syscall(struct user_regs_struct *r, long nr,
					    const uint64_t args[TP_ARCH_SYSCALL_NARGS])
{
	r->rax = (uint64_t)nr;
	r->rdi = args[0];
	r->rsi = args[1];
	r->rdx = args[2];
	r->r10 = args[3];
	r->r8 = args[4];
	r->r9 = args[5];
	r->orig_rax = (uint64_t)-1;
}

/* A function call: integer arguments in rdi, rsi, rdx, rcx, r8, r9; rax = 0 (the number of
 * vector registers a variadic callee reads); @sp holds the return address. */
static inline void tp_arch_regs_set_call(struct user_regs_struct *r, uint64_t fn, uint64_t sp,
					 const uint64_t args[TP_ARCH_CALL_NARGS])
{
	r->rip = fn;
	r->rsp = sp;
	r->rdi = args[0];
	r->rsi = args[1];
	r->rdx = args[2];
	r->rcx = args[3];
	r->r8 = args[4];
	r->r9 = args[5];
	r->rax = 0;
	r->orig_rax = (uint64_t)-1;
}

/* Where a call's return address goes below @rsp: past the red zone (and @extra bytes more),
 * aligned as at a function's entry. */
static inline uint64_t tp_arch_call_sp(uint64_t rsp, uint64_t extra)
{
	return ((rsp - TP_ARCH_RED_ZONE - extra) & ~(uint64_t)(TP_ARCH_STACK_ALIGN - 1)) - 8;
}

/* Is @rv (rax at a syscall-exit stop) one of the restart codes? */
static inline int tp_arch_syscall_restarts(int64_t rv)
{
	return rv == -TP_ARCH_ERESTARTSYS || rv == -TP_ARCH_ERESTARTNOINTR ||
	       rv == -TP_ARCH_ERESTARTNOHAND || rv == -TP_ARCH_ERESTART_RESTARTBLOCK;
}

/* Restart the interrupted syscall of @r as the kernel does when no handler runs: back over
 * the syscall instruction, with its number (or restart_syscall) in rax.  0, or -1 when @r
 * is not stopped in a restartable syscall. */
static inline int tp_arch_regs_restart_syscall(struct user_regs_struct *r)
{
	int64_t rv = (int64_t)r->rax;

	if ((int64_t)r->orig_rax < 0 || !tp_arch_syscall_restarts(rv))
		return -1;
	r->rax = rv == -TP_ARCH_ERESTART_RESTARTBLOCK ? (uint64_t)SYS_restart_syscall : r->orig_rax;
	r->rip -= TP_ARCH_SYSCALL_LEN;
	return 0;
}

/* The dynamic loader's debugger interface (<link.h>), read from another process. */
#define TP_ARCH_R_DEBUG_VERSION offsetof(struct r_debug, r_version)
#define TP_ARCH_R_DEBUG_MAP offsetof(struct r_debug, r_map)
#define TP_ARCH_R_DEBUG_BRK offsetof(struct r_debug, r_brk)
#define TP_ARCH_R_DEBUG_STATE offsetof(struct r_debug, r_state)
#define TP_ARCH_R_DEBUG_LDBASE offsetof(struct r_debug, r_ldbase)
#define TP_ARCH_LINK_MAP_ADDR offsetof(struct link_map, l_addr)
#define TP_ARCH_LINK_MAP_NAME offsetof(struct link_map, l_name)
#define TP_ARCH_LINK_MAP_LD offsetof(struct link_map, l_ld)
#define TP_ARCH_LINK_MAP_NEXT offsetof(struct link_map, l_next)
#define TP_ARCH_LINK_MAP_PREV offsetof(struct link_map, l_prev)

#endif
