/* Functions of known instruction shapes for test-pad.c: each PF_x label is a patch point,
 * PF_x_end the function's end (its bounds for the branch scan).  Lengths are exact here,
 * the test checks them with the decoder. */
#define FN(name) .globl name; .type name, @function; name:
#define END(name) .globl name##_end; name##_end: .size name, .-name

	.text
/* a + b; 1-byte instruction first (push %rbx), then 3 and 4 bytes */
	.p2align 4
FN(pf_len1)
	push %rbx
	mov %rdi, %rbx
	lea (%rbx,%rsi), %rax
	pop %rbx
	ret
END(pf_len1)

/* 2 * (a + b) on 32 bits; 2-byte instructions */
	.p2align 4
FN(pf_len2)
	mov %edi, %eax
	add %esi, %eax
	add %eax, %eax
	ret
END(pf_len2)

/* a - b; 3-byte instructions */
	.p2align 4
FN(pf_len3)
	mov %rdi, %rax
	sub %rsi, %rax
	ret
END(pf_len3)

/* a + 2b + 7; 4-byte instructions */
	.p2align 4
FN(pf_len4)
	lea (%rdi,%rsi,2), %rax
	add $7, %rax
	ret
END(pf_len4)

/* a + b in 4 bytes (lea, ret), then alignment padding up to the next function */
	.p2align 4
FN(pf_tiny)
	lea (%rdi,%rsi), %eax
	ret
END(pf_tiny)
	.p2align 4, 0x90
	.globl pf_tiny_pad
pf_tiny_pad:

/* 3n (n >= 1): the 2-byte xor is followed by a loop's target */
	.p2align 4
FN(pf_target)
	xor %eax, %eax
	.globl pf_target_loop
pf_target_loop:
	add $3, %rax
	dec %rdi
	jnz pf_target_loop
	ret
END(pf_target)

/* pf_global + a: a 7-byte RIP-relative load at the patch point */
	.p2align 4
FN(pf_riprel)
	mov pf_global(%rip), %rax
	add %rdi, %rax
	ret
END(pf_riprel)

/* A leaf that keeps 16 words in its red zone across the patch point: 16a + 120 */
	.p2align 4
FN(pf_redzone)
	.irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	lea \i(%rdi), %rcx
	mov %rcx, -8-8*\i(%rsp)
	.endr
	.globl pf_redzone_at
pf_redzone_at:
	mov %rdi, %rdx
	xor %eax, %eax
	.irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	add -8-8*\i(%rsp), %rax
	.endr
	ret
END(pf_redzone)

/* The flags of cmp b, a, as they are after the patched instructions (CF PF AF ZF SF OF) */
	.p2align 4
FN(pf_flags)
	cmp %rsi, %rdi
	.globl pf_flags_at
pf_flags_at:
	mov %rdi, %rcx
	mov %rsi, %rdx
	pushfq
	pop %rax
	and $0x8d5, %eax
	ret
END(pf_flags)

/* The same with the direction flag set across the site (the pad's slower way back). */
	.p2align 4
FN(pf_df)
	cmp %rsi, %rdi
	std
	.globl pf_df_at
pf_df_at:
	mov %rdi, %rcx
	mov %rsi, %rdx
	pushfq
	pop %rax
	cld
	and $0xcd5, %eax
	ret
END(pf_df)

/* Every general register (and xmm0-15, the flags, the stack pointer and 8 bytes at it) set
 * to known values before five 1-byte nops, stored into pf_out after them. */
	.p2align 4
FN(pf_regs)
	push %rbx
	push %rbp
	push %r12
	push %r13
	push %r14
	push %r15
	push $0x5a5a5a5a
	.irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	movdqu pf_xmm_in+16*\i(%rip), %xmm\i
	.endr
	movabs $0x1111111111111101, %rax
	movabs $0x2222222222222202, %rbx
	movabs $0x3333333333333303, %rcx
	movabs $0x4444444444444404, %rdx
	movabs $0x5555555555555505, %rsi
	movabs $0x6666666666666606, %rdi
	movabs $0x7777777777777707, %rbp
	movabs $0x8888888888888808, %r8
	movabs $0x9999999999999909, %r9
	movabs $0xaaaaaaaaaaaaaa0a, %r10
	movabs $0xbbbbbbbbbbbbbb0b, %r11
	movabs $0xcccccccccccccc0c, %r12
	movabs $0xdddddddddddddd0d, %r13
	movabs $0xeeeeeeeeeeeeee0e, %r14
	movabs $0xffffffffffffff0f, %r15
	stc
	std
	.globl pf_regs_at
pf_regs_at:
	nop
	nop
	nop
	nop
	nop
	mov %rax, pf_out+0(%rip)
	mov %rbx, pf_out+8(%rip)
	mov %rcx, pf_out+16(%rip)
	mov %rdx, pf_out+24(%rip)
	mov %rsi, pf_out+32(%rip)
	mov %rdi, pf_out+40(%rip)
	mov %rbp, pf_out+48(%rip)
	mov %rsp, pf_out+56(%rip)
	mov %r8, pf_out+64(%rip)
	mov %r9, pf_out+72(%rip)
	mov %r10, pf_out+80(%rip)
	mov %r11, pf_out+88(%rip)
	mov %r12, pf_out+96(%rip)
	mov %r13, pf_out+104(%rip)
	mov %r14, pf_out+112(%rip)
	mov %r15, pf_out+120(%rip)
	pushfq
	pop pf_out+136(%rip)
	cld
	.irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	movdqu %xmm\i, pf_xmm_out+16*\i(%rip)
	.endr
	add $8, %rsp
	pop %r15
	pop %r14
	pop %r13
	pop %r12
	pop %rbp
	pop %rbx
	ret
END(pf_regs)

	.data
	.p2align 4
	.globl pf_global, pf_out, pf_xmm_in, pf_xmm_out
pf_global:
	.quad 0x100000
pf_out:
	.zero 144
pf_xmm_in:
	.zero 256
pf_xmm_out:
	.zero 256

	.section .note.GNU-stack, "", @progbits
