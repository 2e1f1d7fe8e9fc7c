/* Hand-written code whose instruction counts are known in closed form, so that the e2e tests
 * can check `tracepad count` against arithmetic instead of against itself.  Every count
 * below is what single-stepping sees, from the function's first instruction to its `ret`
 * (both included). */

	.text

/* void tp_loop(unsigned long n)
 * mov, test, jz, then n times (dec, jnz), then ret:  count = 2n + 4  (n = 0 gives 4). */
	.globl	tp_loop
	.type	tp_loop, @function
tp_loop:
	mov	%rdi, %rcx
	test	%rcx, %rcx
	jz	2f
1:	dec	%rcx
	jnz	1b
2:	ret
	.size	tp_loop, . - tp_loop

/* void tp_repmovs(void *dst, const void *src, unsigned long k)
 * mov, rep movsb, ret.  A rep-prefixed string instruction counts once per iteration, and
 * once when rcx = 0:  count = 2 + max(k, 1). */
	.globl	tp_repmovs
	.type	tp_repmovs, @function
tp_repmovs:
	mov	%rdx, %rcx
	rep movsb
	ret
	.size	tp_repmovs, . - tp_repmovs

/* void tp_step_loop(unsigned long n)
 * The same sequence as tp_step_begin(); tp_loop(n); tp_step_end(); from <tracepad/step.h>,
 * written out so that the compiler cannot change it.  Counted: from the instruction after
 * the call of tracepad_step_begin to the call of tracepad_step_end included:
 * mov, call tp_loop, (2n + 4), mov, test, jz, call  =  2n + 10. */
	.weak	tracepad_step_begin
	.weak	tracepad_step_end
	.globl	tp_step_loop
	.type	tp_step_loop, @function
tp_step_loop:
	push	%rbx			/* also keeps %rsp 16-byte aligned at the calls */
	mov	%rdi, %rbx
	mov	tracepad_step_begin@GOTPCREL(%rip), %rax
	test	%rax, %rax
	jz	1f
	call	*%rax
1:	mov	%rbx, %rdi
	call	tp_loop
	mov	tracepad_step_end@GOTPCREL(%rip), %rax
	test	%rax, %rax
	jz	2f
	call	*%rax
2:	pop	%rbx
	ret
	.size	tp_step_loop, . - tp_step_loop

	.section .note.GNU-stack, "", @progbits
