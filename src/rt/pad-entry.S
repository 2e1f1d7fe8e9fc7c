/* The common body of every jump pad: save the flags and every general register into a
 * struct tp_rt_regs on the program's stack (below its red zone), call tp_rt_pad_hit on a
 * 16-byte aligned stack (inside xsave/xrstor for TP_RT_PAD_FPU sites), restore, return to the
 * pad.  The pad entered it with:
 *     lea -128(%rsp),%rsp; push $site; push %rax; mov $tp_rt_pad_entry,%rax; call *%rax
 * and goes on, once it returns, with lea 144(%rsp),%rsp and the displaced instructions. */

/* struct tp_rt_regs */
#define R_RAX 0
#define R_RBX 8
#define R_RCX 16
#define R_RDX 24
#define R_RSI 32
#define R_RDI 40
#define R_RBP 48
#define R_RSP 56
#define R_R8 64
#define R_R9 72
#define R_R10 80
#define R_R11 88
#define R_R12 96
#define R_R13 104
#define R_R14 112
#define R_R15 120
#define R_RIP 128
#define R_FLAGS 136
/* The record's address above which, after pushfq and lea -136: the pad's return address
 * (144), the program's %rax (152), the site (160), the red zone (168..295), the program's
 * stack (296). */
#define F_RAX 152
#define F_SITE 160
#define F_PROG 296
/* struct pad_site (pad.c): its address and flags (checked there with static asserts). */
#define SITE_ADDR 0
#define SITE_FLAGS 8
#define SITE_F_FPU 2

	.text
	.p2align 4
	.globl tp_rt_pad_entry
	.hidden tp_rt_pad_entry
	.type tp_rt_pad_entry, @function
tp_rt_pad_entry:
	.cfi_startproc
	pushfq			/* before anything changes a flag */
	lea -136(%rsp), %rsp
	mov %rbx, R_RBX(%rsp)
	mov %rcx, R_RCX(%rsp)
	mov %rdx, R_RDX(%rsp)
	mov %rsi, R_RSI(%rsp)
	mov %rdi, R_RDI(%rsp)
	mov %rbp, R_RBP(%rsp)
	mov %r8, R_R8(%rsp)
	mov %r9, R_R9(%rsp)
	mov %r10, R_R10(%rsp)
	mov %r11, R_R11(%rsp)
	mov %r12, R_R12(%rsp)
	mov %r13, R_R13(%rsp)
	mov %r14, R_R14(%rsp)
	mov %r15, R_R15(%rsp)
	mov F_RAX(%rsp), %rax
	mov %rax, R_RAX(%rsp)
	lea F_PROG(%rsp), %rax
	mov %rax, R_RSP(%rsp)
	mov F_SITE(%rsp), %rbx
	mov SITE_ADDR(%rbx), %rax
	mov %rax, R_RIP(%rsp)
	mov %rsp, %r12		/* the record; callee-saved across the call */
	cld			/* the ABI's direction flag for C; popfq restores the program's */
	testl $SITE_F_FPU, SITE_FLAGS(%rbx)
	jnz 1f
	and $-16, %rsp
	mov %rbx, %rdi
	mov %r12, %rsi
	call tp_rt_pad_hit
	jmp 2f
1:	/* xsave's area: 64-byte aligned, its header zeroed (xrstor checks it) */
	sub tp_rt_pad_xsave_size(%rip), %rsp
	and $-64, %rsp
	xor %eax, %eax
	mov %rax, 512(%rsp)
	mov %rax, 520(%rsp)
	mov %rax, 528(%rsp)
	mov %rax, 536(%rsp)
	mov %rax, 544(%rsp)
	mov %rax, 552(%rsp)
	mov %rax, 560(%rsp)
	mov %rax, 568(%rsp)
	mov $-1, %eax
	mov $-1, %edx
	xsave64 (%rsp)
	mov %rsp, %r13
	mov %rbx, %rdi
	mov %r12, %rsi
	call tp_rt_pad_hit
	mov $-1, %eax
	mov $-1, %edx
	xrstor64 (%r13)
2:	mov %r12, %rsp
	mov R_RBX(%rsp), %rbx
	mov R_RCX(%rsp), %rcx
	mov R_RDX(%rsp), %rdx
	mov R_RSI(%rsp), %rsi
	mov R_RDI(%rsp), %rdi
	mov R_RBP(%rsp), %rbp
	mov R_R8(%rsp), %r8
	mov R_R9(%rsp), %r9
	mov R_R10(%rsp), %r10
	mov R_R11(%rsp), %r11
	mov R_R12(%rsp), %r12
	mov R_R13(%rsp), %r13
	mov R_R14(%rsp), %r14
	mov R_R15(%rsp), %r15
	/* The flags back without popfq (~10 ns here): OF by a signed overflow of al, then SF,
	 * ZF, AF, PF and CF by sahf; nothing after them writes a flag.  The callback changes no
	 * other flag but DF (cld), so a site entered with DF set takes popfq. */
	testl $0x400, R_FLAGS(%rsp)
	jnz 3f
	movzbl R_FLAGS+1(%rsp), %eax
	shr $3, %eax
	and $1, %eax
	add $0x7f, %al
	movb R_FLAGS(%rsp), %ah
	sahf
	mov R_RAX(%rsp), %rax
	lea 144(%rsp), %rsp
	ret
3:	mov R_RAX(%rsp), %rax
	lea 136(%rsp), %rsp
	popfq
	ret
	.cfi_endproc
	.size tp_rt_pad_entry, .-tp_rt_pad_entry

	.section .note.GNU-stack, "", @progbits
