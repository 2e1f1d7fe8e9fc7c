/* The dec/jnz loop that bench/count measures: the floors step it, and count-target runs it
 * under tracepad, so both sides step the same instructions.
 * void bench_loop(unsigned long n): mov, test, jz, n x (dec, jnz), ret = 2n + 4 instructions. */

	.text
	.globl	bench_loop
	.type	bench_loop, @function
bench_loop:
	mov	%rdi, %rcx
	test	%rcx, %rcx
	jz	2f
1:	dec	%rcx
	jnz	1b
2:	ret
	.size	bench_loop, . - bench_loop

	.section .note.GNU-stack, "", @progbits
