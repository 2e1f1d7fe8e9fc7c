/* Targets of fast tracepoints where a jmp cannot simply replace one instruction: 1-, 2-, 3-
 * and 4-byte instructions, one followed by a branch target (shorts), and a leaf function
 * that keeps live values in its red zone across the traced instruction (redzone).  The
 * addresses of the traced instructions are in short_addrs (the program is not PIE). */
	.text
	.globl shorts
	.type shorts, @function
/* long shorts(long n): sum over i < n of (i + 1) */
shorts:
	xor %eax, %eax
	xor %ecx, %ecx
	jmp .Lcheck
.Ltop:
.Ltp1:	push %rbx		/* 1 byte */
	pop %rbx
.Ltp2:	mov %ecx, %edx		/* 2 bytes */
.Ltp3:	add %rdx, %rax		/* 3 bytes */
.Ltp4:	add $1, %rax		/* 4 bytes */
.Ltp5:	inc %rcx		/* 3 bytes, then a branch target */
.Lcheck:
	cmp %rdi, %rcx
	jb .Ltop
	ret
	.size shorts, .-shorts

	.globl redzone
	.type redzone, @function
/* long redzone(long x): 16 values x + k kept below %rsp (a leaf: the red zone is its own),
 * a 5-byte instruction traced between their stores and their loads; returns their sum,
 * 16 x + 120, and 0 in %rdx would be wrong. */
redzone:
	lea 0(%rdi), %rax
	mov %rax, -8(%rsp)
	lea 1(%rdi), %rax
	mov %rax, -16(%rsp)
	lea 2(%rdi), %rax
	mov %rax, -24(%rsp)
	lea 3(%rdi), %rax
	mov %rax, -32(%rsp)
	lea 4(%rdi), %rax
	mov %rax, -40(%rsp)
	lea 5(%rdi), %rax
	mov %rax, -48(%rsp)
	lea 6(%rdi), %rax
	mov %rax, -56(%rsp)
	lea 7(%rdi), %rax
	mov %rax, -64(%rsp)
	lea 8(%rdi), %rax
	mov %rax, -72(%rsp)
	lea 9(%rdi), %rax
	mov %rax, -80(%rsp)
	lea 10(%rdi), %rax
	mov %rax, -88(%rsp)
	lea 11(%rdi), %rax
	mov %rax, -96(%rsp)
	lea 12(%rdi), %rax
	mov %rax, -104(%rsp)
	lea 13(%rdi), %rax
	mov %rax, -112(%rsp)
	lea 14(%rdi), %rax
	mov %rax, -120(%rsp)
	lea 15(%rdi), %rax
	mov %rax, -128(%rsp)
.Lrz:	mov $0, %eax		/* 5 bytes: the traced instruction */
	add -8(%rsp), %rax
	add -16(%rsp), %rax
	add -24(%rsp), %rax
	add -32(%rsp), %rax
	add -40(%rsp), %rax
	add -48(%rsp), %rax
	add -56(%rsp), %rax
	add -64(%rsp), %rax
	add -72(%rsp), %rax
	add -80(%rsp), %rax
	add -88(%rsp), %rax
	add -96(%rsp), %rax
	add -104(%rsp), %rax
	add -112(%rsp), %rax
	add -120(%rsp), %rax
	add -128(%rsp), %rax
	ret
	.size redzone, .-redzone

	.section .rodata
	.globl short_addrs
	.p2align 3
short_addrs:
	.quad .Ltp1, .Ltp2, .Ltp3, .Ltp4, .Ltp5, .Lrz, 0

	.section .note.GNU-stack, "", @progbits
