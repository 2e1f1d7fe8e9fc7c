/* The function the benchmark traces: a usual prologue (push %rbp, 1 byte, first), called
 * in a loop; bench_fn_end bounds it for the branch scan. */
	.text
	.p2align 4
	.globl bench_fn, bench_fn_end
	.type bench_fn, @function
bench_fn:
	push %rbp
	mov %rsp, %rbp
	lea 1(%rdi), %rax
	pop %rbp
	ret
bench_fn_end:
	.size bench_fn, .-bench_fn
	.section .note.GNU-stack, "", @progbits

/* gdb's ftrace needs an instruction of 5 bytes or more */
	.text
	.p2align 4
	.globl gfn, gfn_at
	.type gfn, @function
gfn:
gfn_at:
	mov $7, %eax
	add %rdi, %rax
	ret
	.size gfn, .-gfn
	.section .note.GNU-stack, "", @progbits
