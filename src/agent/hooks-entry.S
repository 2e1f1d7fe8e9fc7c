/* The entry body and the return trampoline of call hooks (hooks.c).  Every register and the
 * flags are kept; no vector register is touched (the C they call is general-regs-only), so
 * float arguments and returns pass. */
#include "agent/hooks-fast.h"

#if SF_SIZE != 32
#error "tp_hk_tramp finds a frame by a shift of 5"
#endif

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
	push %rbp
	mov %rsp, %rbx
	mov %rsp, %rdi
	and $-16, %rsp
	cld
	call tp_hk_enter
	mov %rbx, %rsp
	test %eax, %eax		/* no instruction below changes a flag before the jnz */
	pop %rbp
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
	/* From here: 0 rbx, 8 r11, 16 r10, 24 r9, 32 r8, 40 rdi, 48 rsi, 56 rdx, 64 rcx, 72 rax,
	 * 80 the flags, 88 the frame's slot.  The common case, as tp_hk_ret() does it (hooks.c
	 * says why each check): the innermost frame returns, in a thread recording outside any
	 * hook, with no payload and room in its ring; anything else goes to tp_hk_ret(). */
	mov tp_hk_ts@gottpoff(%rip), %r9
	mov %fs:HS_SH(%r9), %rsi	/* the thread's shadow stack */
	test %rsi, %rsi
	jz .Lfull
	cmpl $0, %fs:HS_IN(%r9)
	jne .Lfull
	mov SH_N(%rsi), %ecx
	test %ecx, %ecx
	jz .Lfull
	cmpq $0, SH_WALK(%rsi)
	jne .Lfull
	lea -1(%rcx), %edi
	shl $5, %rdi
	lea SH_F(%rsi,%rdi), %rdi	/* the innermost frame */
	lea 88(%rsp), %r8
	cmp %r8, SF_SLOT(%rdi)
	jne .Lfull
	testw $SF_RESTORED_BIT, SF_FLAGS(%rdi)
	jnz .Lfull
	/* the mark before the look at hk.on */
	incl SH_BUSY(%rsi)
	lea tp_hk_state(%rip), %r11
	cmpl $0, HK_ON(%r11)
	je .Lfull_busy
	cmpl $0, HK_FORKED(%r11)
	jne .Lfull_busy
	mov HK_GEN(%r11), %eax
	cmp %eax, %fs:HS_GEN(%r9)
	jne .Lfull_busy
	cmpl $0, %fs:HS_RING(%r9)
	js .Lfull_busy
	cmpq $0, HK_CTL(%r11)
	je .Lfull_busy
	testw $SF_EVENTS_BIT, SF_FLAGS(%rdi)
	jz .Lpop
	cmp %ax, SF_GEN(%rdi)
	jne .Lpop
	mov SF_FUNC(%rdi), %ecx
	imul $FN_SIZE, %rcx, %rcx
	add HK_FUNCS(%r11), %rcx
	cmpw $0, FN_PLAN_RET(%rcx)
	jne .Lfull_busy
	/* room for the record without a filler or a wait (ring.h's fast case) */
	movslq %fs:HS_RING(%r9), %rcx
	imul $RING_SIZE, %rcx, %r10
	add HK_RINGS(%r11), %r10	/* the ring */
	mov HK_RSIZE(%r11), %eax
	imul %rax, %rcx
	add HK_DATA(%r11), %rcx		/* its data */
	mov RING_HEAD(%r10), %rbx	/* its head */
	lea -1(%rax), %rdx
	and %rbx, %rdx			/* where the head is */
	lea REC_RETURN_SIZE(%rdx), %r8
	cmp %rax, %r8
	ja .Lfull_busy
	mov %rbx, %r8
	sub %fs:HS_TAIL(%r9), %r8
	sub %r8, %rax
	cmp $REC_RETURN_SIZE, %rax
	jb .Lfull_busy
	add %rdx, %rcx			/* the record */
	movl $1, %fs:HS_IN(%r9)
	/* size, type, flags; func, errno (TLS, at the offset tracepad found); tsc; sp; rax, rdx */
	mov SF_FUNC(%rdi), %eax
	movabs $(REC_RETURN_SIZE | (REC_RETURN << 32)), %r8
	cmpl $0, HK_ERRNO_OK(%r11)
	je 1f
	mov HK_ERRNO_TPOFF(%r11), %rdx
	mov %fs:(%rdx), %edx
	shl $32, %rdx
	or %rdx, %rax
	movabs $(REC_RETURN_SIZE | (REC_RETURN << 32) | (REC_R_ERRNO << 48)), %r8
1:	mov %r8, (%rcx)
	mov %rax, 8(%rcx)
	rdtsc
	shl $32, %rdx
	or %rdx, %rax
	mov %rax, 16(%rcx)
	lea 88(%rsp), %r8
	mov %r8, 24(%rcx)
	mov 72(%rsp), %rax
	mov %rax, 32(%rcx)
	mov 56(%rsp), %rax
	mov %rax, 40(%rcx)
	add $REC_RETURN_SIZE, %rbx
	mov %rbx, RING_HEAD(%r10)	/* published: x86 stores are release stores */
	cmpl $0, HK_PREFETCHW(%r11)
	je .Lpop
	prefetchw PREFETCH_AHEAD(%rcx)
.Lpop:
	mov SF_RET(%rdi), %rax
	mov %rax, 88(%rsp)
	decl SH_N(%rsi)			/* one instruction: no signal comes between */
	movl $0, %fs:HS_IN(%r9)
	decl SH_BUSY(%rsi)
	jmp .Lback
.Lfull_busy:
	decl SH_BUSY(%rsi)
.Lfull:
	mov %rsp, %rbx
	lea 96(%rsp), %rdi	/* the stack pointer after the hooked function's ret */
	mov 72(%rsp), %rsi	/* the return's registers, as they are */
	mov 56(%rsp), %rdx
	and $-16, %rsp
	cld
	call tp_hk_ret
	mov %rbx, %rsp
	mov %rax, 88(%rsp)
.Lback:
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
