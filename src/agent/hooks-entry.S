/* The return trampoline of call hooks (hooks.c): a hooked call returns here instead of to
 * its caller; tp_hk_ret() records the return and answers the real return address, which
 * goes where this code's own ret takes it.  Every register and the flags are kept; no
 * vector register is touched (tp_hk_ret is general-regs-only), so float returns pass. */
	.text
	.p2align 4
	.globl tp_hk_tramp
	.hidden tp_hk_tramp
	.type tp_hk_tramp, @function
tp_hk_tramp:
	sub $8, %rsp		/* the real return address, filled below */
	pushfq
	push %rax
	push %rcx
	push %rdx
	push %rsi
	push %rdi
	push %r8
	push %r9
	push %r10
	push %r11
	push %rbx
	mov %rsp, %rbx
	lea 96(%rsp), %rdi	/* the stack pointer after the hooked function's ret */
	mov %rax, %rsi		/* rdx: the return's second register, as it is */
	and $-16, %rsp
	cld
	call tp_hk_ret
	mov %rbx, %rsp
	mov %rax, 88(%rsp)
	pop %rbx
	pop %r11
	pop %r10
	pop %r9
	pop %r8
	pop %rdi
	pop %rsi
	pop %rdx
	pop %rcx
	/* the flags back without popfq, as rt's pad-entry.S does (DF set: popfq) */
	testl $0x400, 8(%rsp)
	jnz 1f
	movzbl 9(%rsp), %eax
	shr $3, %eax
	and $1, %eax
	add $0x7f, %al
	movb 8(%rsp), %ah
	sahf
	pop %rax
	/* to the caller by an indirect jmp, not ret: the hooked function's ret took the
	 * caller's entry off the return stack buffer, so a ret here would always be
	 * mispredicted.  The address stays below the stack pointer only within the red zone,
	 * which no signal frame overwrites. */
	lea 16(%rsp), %rsp
	jmp *-8(%rsp)
1:	pop %rax
	popfq
	lea 8(%rsp), %rsp
	jmp *-8(%rsp)
	.size tp_hk_tramp, .-tp_hk_tramp
	.section .note.GNU-stack, "", @progbits
