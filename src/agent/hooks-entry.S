/* The entry body and the return trampoline of call hooks (hooks.c).  Every register and the
 * flags are kept; no vector register is touched (the C they call is general-regs-only), so
 * float arguments and returns pass. */
	.text

/* What each hooked function's pad calls (rt/pad.h, tp_rt_pad_install_entry): the registers a
 * call of C may change pushed, tp_hk_enter() on them (hooks.c's struct fast, whose layout this
 * push order makes), and back to the pad, or on to rt's common body when tp_hk_enter answers
 * that this entry needs the full register record (then hooks.c's hit() runs). */
	.p2align 4
	.globl tp_hk_pad_entry
	.hidden tp_hk_pad_entry
	.type tp_hk_pad_entry, @function
tp_hk_pad_entry:
	pushfq
	push %r11
	push %r10
	push %r9
	push %r8
	push %rcx
	push %rdx
	push %rsi
	push %rdi
	push %rbx
	mov %rsp, %rbx
	mov %rsp, %rdi
	and $-16, %rsp
	cld
	call tp_hk_enter
	mov %rbx, %rsp
	test %eax, %eax		/* no instruction below changes a flag before the jnz */
	pop %rbx
	pop %rdi
	pop %rsi
	pop %rdx
	pop %rcx
	pop %r8
	pop %r9
	pop %r10
	pop %r11
	jnz 2f
	/* done here: the flags back as rt's pad-entry.S puts them back (DF set: popfq) */
	testl $0x400, (%rsp)
	jnz 1f
	movzbl 1(%rsp), %eax
	shr $3, %eax
	and $1, %eax
	add $0x7f, %al
	movb (%rsp), %ah
	sahf
	mov 16(%rsp), %rax
	lea 8(%rsp), %rsp
	ret
1:	popfq
	mov 8(%rsp), %rax
	ret
	/* the full record: rt's body, with the stack and the flags as the pad left them */
2:	popfq
	jmp tp_rt_pad_entry
	.size tp_hk_pad_entry, .-tp_hk_pad_entry

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
