/* The code cache's entry and exit paths, and the templates of the code the translator
 * copies around each block (assembled here so that no encoding is written by hand).
 * Cache code reaches these through the %gs block (rt-abi.h); all of them run on the
 * runtime's stack: nothing is written below the program's stack pointer. */
#include "dbt/rt-abi.h"
#include "dbt/rt-tpl.h"

	.text

/* Start: rdi = the boot record; the launcher set rsp to the top of the first stack. */
	.globl tp_dbt_rt_start
	.type tp_dbt_rt_start, @function
tp_dbt_rt_start:
	and $-16, %rsp
	call tp_dbt_rt_main
	ud2
	.size tp_dbt_rt_start, .-tp_dbt_rt_start

/* void tp_dbt_rt_enter(const struct tp_dbt_regs *r, uint64_t cache_pc): the program's
 * registers, every one, and on into the cache. */
	.globl tp_dbt_rt_enter
	.hidden tp_dbt_rt_enter
	.type tp_dbt_rt_enter, @function
tp_dbt_rt_enter:
	mov %rsi, %gs:TP_DBT_T_NEXT
	pushq 144(%rdi)		/* eflags */
	popfq
	mov 0(%rdi), %r15
	mov 8(%rdi), %r14
	mov 16(%rdi), %r13
	mov 24(%rdi), %r12
	mov 32(%rdi), %rbp
	mov 40(%rdi), %rbx
	mov 48(%rdi), %r11
	mov 56(%rdi), %r10
	mov 64(%rdi), %r9
	mov 72(%rdi), %r8
	mov 80(%rdi), %rax
	mov 88(%rdi), %rcx
	mov 96(%rdi), %rdx
	mov 104(%rdi), %rsi
	mov 152(%rdi), %rsp
	mov 112(%rdi), %rdi
	jmp *%gs:TP_DBT_T_NEXT
	.size tp_dbt_rt_enter, .-tp_dbt_rt_enter

/* Into C and back: the program's rax is in gs:RAX, rax holds the argument.  Nothing is
 * written below the program's stack pointer (a debugger shows that memory as the program
 * left it): the program's rsp goes into gs:PRSP, rsp to the thread's runtime stack (gs:STACK,
 * lowered below the live part while a handler runs that interrupted the runtime: rt-signal.c)
 * and the frame (struct tp_dbt_frame: the program's registers, flags and rsp) is pushed
 * there; flags are untouched until pushfq.  C may change the frame and returns the cache
 * address to go on at (NEXT says where the program is meanwhile: the argument, then the
 * result).  The slots a handler may find live are saved and put back around it. */
/* The program's registers, flags and rsp back from a frame at rsp; @rax: rax from the frame
 * (else through gs:RAX, which the exit's jmp uses, so that a frame popped up to any point
 * always holds what is not in registers yet: src/debug reads it so). */
.macro POP_FRAME rax=0
	pop %r15
	pop %r14
	pop %r13
	pop %r12
	pop %r11
	pop %r10
	pop %r9
	pop %r8
	pop %rdi
	pop %rsi
	pop %rbp
	pop %rbx
	pop %rdx
	pop %rcx
	.if \rax
	pop %rax
	.else
	popq %gs:TP_DBT_T_RAX
	.endif
	popfq
	pop %rsp
.endm

.macro ENTER_C fn
	mov %rax, %gs:TP_DBT_T_NEXT /* what a signal meanwhile shows (rt-signal.c) */
	mov %rsp, %gs:TP_DBT_T_PRSP
	mov %gs:TP_DBT_T_STACK, %rsp
	pushq %gs:TP_DBT_T_PRSP
	pushfq
	pushq %gs:TP_DBT_T_RAX
	push %rcx
	push %rdx
	push %rbx
	push %rbp
	push %rsi
	push %rdi
	push %r8
	push %r9
	push %r10
	push %r11
	push %r12
	push %r13
	push %r14
	push %r15
	mov %rsp, %rbx
	mov %rbx, %gs:TP_DBT_T_FRAME
	sub $512, %rsp
	and $-64, %rsp
	fxsave64 (%rsp)
	mov %rax, %rdi
	mov %rbx, %rsi
	cld
	call \fn
	mov %rax, %gs:TP_DBT_T_NEXT
	fxrstor64 (%rsp)
	mov %rbx, %rsp
	POP_FRAME
	mov %gs:TP_DBT_T_RAX, %rax
	jmp *%gs:TP_DBT_T_NEXT
.endm

/* An unlinked direct exit: rax = its stub. */
	.globl tp_dbt_rt_direct
	.hidden tp_dbt_rt_direct
	.type tp_dbt_rt_direct, @function
tp_dbt_rt_direct:
	ENTER_C tp_dbt_dispatch_direct
	.size tp_dbt_rt_direct, .-tp_dbt_rt_direct

/* The gate: rax = where to come back; gs:ARG says why. */
	.globl tp_dbt_rt_gate
	.hidden tp_dbt_rt_gate
	.type tp_dbt_rt_gate, @function
tp_dbt_rt_gate:
	ENTER_C tp_dbt_gate
	.size tp_dbt_rt_gate, .-tp_dbt_rt_gate

/* An inline lookup (the ibl template) missed: rax = the program's target. */
	.globl tp_dbt_rt_miss
	.hidden tp_dbt_rt_miss
	.type tp_dbt_rt_miss, @function
tp_dbt_rt_miss:
	ENTER_C tp_dbt_dispatch_indirect
	.size tp_dbt_rt_miss, .-tp_dbt_rt_miss

/* Indirect branch lookup: rax = the program's target; its translation from the thread's
 * table (at a fixed %gs offset), or the dispatcher.  No flag is touched (movzwl, lea, not,
 * jrcxz) and nothing is pushed: the same code as the ibl template that each indirect
 * branch carries inline. */
.macro IBL
	mov %rcx, %gs:TP_DBT_T_IBL_RCX
	movzwl %ax, %ecx
	lea (%rcx,%rcx), %rcx
	mov %gs:TP_DBT_T_TABLE_AT(,%rcx,8), %rcx
	not %rcx
	lea 1(%rcx,%rax), %rcx /* target - entry's pc */
	jrcxz 1f
	mov %gs:TP_DBT_T_IBL_RCX, %rcx
	jmp *%gs:TP_DBT_T_MISS
1:	movzwl %ax, %ecx /* the index again: one register is all the lookup takes */
	lea (%rcx,%rcx), %rcx
	mov %gs:TP_DBT_T_TABLE_AT+8(,%rcx,8), %rcx
	mov %rcx, %gs:TP_DBT_T_NEXT
	mov %gs:TP_DBT_T_IBL_RCX, %rcx
	mov %gs:TP_DBT_T_RAX, %rax
	jmp *%gs:TP_DBT_T_NEXT
.endm

	.globl tp_dbt_rt_ibl
	.hidden tp_dbt_rt_ibl
	.type tp_dbt_rt_ibl, @function
tp_dbt_rt_ibl:
	IBL
	.size tp_dbt_rt_ibl, .-tp_dbt_rt_ibl

/* The kernel's entry for every program handler: rdi, rsi, rdx are the handler's arguments
 * and rsp is on the signal frame; the program's handler runs in the cache from here. */
	.globl tp_dbt_rt_sigtramp
	.hidden tp_dbt_rt_sigtramp
	.type tp_dbt_rt_sigtramp, @function
tp_dbt_rt_sigtramp:
	/* every signal is blocked; the kernel's frame is on the runtime's alternate stack and
	 * C may move it (struct tp_dbt_sigio: frame, siginfo, ucontext, signal, mask) */
	sub $40, %rsp
	lea 40(%rsp), %rax
	mov %rax, 0(%rsp)
	mov %rsi, 8(%rsp)
	mov %rdx, 16(%rsp)
	mov %rdi, 24(%rsp)
	mov %rsp, %rsi
	call tp_dbt_sig_enter
	mov 24(%rsp), %r13
	mov 8(%rsp), %r14
	mov 16(%rsp), %r15
	lea 32(%rsp), %r12
	mov 0(%rsp), %rsp
	test %rax, %rax
	jz 1f
	/* the handler's mask, from the program's stack (the handler's registers are free) */
	mov %rax, %rbx
	mov $14, %eax		/* rt_sigprocmask(SIG_SETMASK, mask, NULL, 8) */
	mov $2, %edi
	mov %r12, %rsi
	xor %edx, %edx
	mov $8, %r10d
	syscall
	.globl tp_dbt_rt_sigtramp_go
	.hidden tp_dbt_rt_sigtramp_go
tp_dbt_rt_sigtramp_go:
	mov %r13, %rdi
	mov %r14, %rsi
	mov %r15, %rdx
	mov %rbx, %rax
	movq $0, %gs:TP_DBT_T_RAX
	mov %rax, %gs:TP_DBT_T_NEXT /* until the lookup finds it */
	jmp *%gs:TP_DBT_T_IBL
	/* deferred (it came while the runtime's C code ran): back at once, redelivered later */
1:	add $8, %rsp
	mov $15, %eax
	syscall
	ud2
	.globl tp_dbt_rt_sigtramp_end
	.hidden tp_dbt_rt_sigtramp_end
tp_dbt_rt_sigtramp_end:
	.size tp_dbt_rt_sigtramp, .-tp_dbt_rt_sigtramp

/* void tp_dbt_rt_sigreturn(uint64_t rsp, uint64_t frame, uint64_t prsp): the kernel's
 * rt_sigreturn with the frame at rsp; gs:FRAME and gs:PRSP are set once off the runtime's
 * stack (rt-signal.c). */
	.globl tp_dbt_rt_sigreturn
	.hidden tp_dbt_rt_sigreturn
	.type tp_dbt_rt_sigreturn, @function
tp_dbt_rt_sigreturn:
	mov %rdi, %rsp
	mov %rsi, %gs:TP_DBT_T_FRAME
	mov %rdx, %gs:TP_DBT_T_PRSP
	mov $15, %eax
	syscall
	ud2
	.size tp_dbt_rt_sigreturn, .-tp_dbt_rt_sigreturn

/* void tp_dbt_rt_leave(struct tp_dbt_frame *f, uint64_t gs): the program sets %gs and runs
 * natively from here on, with the registers of @f (rcx: its next pc; rax: the result). */
	.globl tp_dbt_rt_leave
	.hidden tp_dbt_rt_leave
	.type tp_dbt_rt_leave, @function
tp_dbt_rt_leave:
	mov %rdi, %rsp
	mov $158, %eax		/* arch_prctl(ARCH_SET_GS, gs) */
	mov $0x1001, %edi
	syscall
	mov %rax, 112(%rsp)	/* the frame's rax */
	POP_FRAME rax=1
	jmp *%rcx
	.size tp_dbt_rt_leave, .-tp_dbt_rt_leave

/* ---- templates: copied into the cache, patched where a label ends a field ---- */
	.section .rodata

/* count += N (the patched imm32) where the block's first instructions write every status
 * flag before reading one (rt-cache.c) */
TPL count_add
	addq $0x7fffffff, %gs:TP_DBT_T_COUNT
TPL count_add_end

/* count += N (the patched disp32 of the lea), flags untouched */
TPL count
	mov %rax, %gs:TP_DBT_T_RAX
	mov %gs:TP_DBT_T_COUNT, %rax
TPL count_w
	lea 0x7fffffff(%rax), %rax
TPL count_n
	mov %rax, %gs:TP_DBT_T_COUNT
	mov %gs:TP_DBT_T_RAX, %rax
TPL count_end

/* count += N (the lea's patched disp32) through a register the block's first instruction
 * sets without reading it (rt-count.c), flags untouched and no rax to save: one template
 * per register (rsp's unused), 32 bytes apart, their lengths after them */
	.p2align 5
TPL count_regs
.irp reg, rax,rcx,rdx,rbx,rsp,rbp,rsi,rdi,r8,r9,r10,r11,r12,r13,r14,r15
	.p2align 5
.Lcr_\reg:
	mov %gs:TP_DBT_T_COUNT, %\reg
	lea 0x7fffffff(%\reg), %\reg
	mov %\reg, %gs:TP_DBT_T_COUNT
.Lcr_\reg\()_end:
.endr
TPL count_regs_len
.irp reg, rax,rcx,rdx,rbx,rsp,rbp,rsi,rdi,r8,r9,r10,r11,r12,r13,r14,r15
	.byte .Lcr_\reg\()_end - .Lcr_\reg
.endr

/* around a rep string instruction: count += max(rcx before - rcx after, 1), flags
 * untouched (bswap and movzx of dh instead of a compare) */
TPL rep_pre
	mov %rcx, %gs:TP_DBT_T_RCX0
TPL rep_post
	mov %rax, %gs:TP_DBT_T_RAX
	mov %rdx, %gs:TP_DBT_T_RDX
	REP_DONE
	mov %gs:TP_DBT_T_COUNT, %rdx
TPL rep_w
	lea (%rax,%rdx), %rax
TPL rep_w2
	mov %rax, %gs:TP_DBT_T_COUNT
	mov %gs:TP_DBT_T_RDX, %rdx
	mov %gs:TP_DBT_T_RAX, %rax
TPL rep_end

/* the unlinked exit (rt-abi.h: TP_DBT_STUB_*) */
	.p2align 3
TPL stub
	mov %rax, %gs:TP_DBT_T_RAX
	lea tp_dbt_tpl_stub(%rip), %rax
	jmp *%gs:TP_DBT_T_DIRECT
	.quad 0
	.quad 0
TPL stub_end

/* the gate, coming back after itself; the reason is the patched imm32 */
TPL gate
	mov %rax, %gs:TP_DBT_T_RAX
	movq $0x7fffffff, %gs:TP_DBT_T_ARG
TPL gate_reason
	lea tp_dbt_tpl_gate_end(%rip), %rax
	jmp *%gs:TP_DBT_T_GATE
TPL gate_end

/* indirect branches: save rax (then "mov rax, <operand>" or "pop rax"), look up */
TPL save_rax
	mov %rax, %gs:TP_DBT_T_RAX
TPL save_rax_end
TPL to_ibl
	IBL
TPL to_ibl_end

/* after a syscall: rcx as the kernel would have left it (the program's next pc, patched) */
TPL sysret
	movabs $0x7fffffffffffffff, %rcx
TPL sysret_end

	.section .note.GNU-stack, "", @progbits
