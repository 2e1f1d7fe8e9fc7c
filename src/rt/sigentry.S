/* The signal virtualisation's entry points (signals.c): they control EFLAGS.TF exactly, so
 * that a stepped program handler's first counted instruction is its own. */

#define TF_ON pushfq; orq $0x100, (%rsp); popfq

	.text

/* Real handler of every signal the program handles: asks tp_rt_sig_dispatch() for the program's
 * handler and whether to step it, then jumps to it with the kernel's frame untouched, so the
 * handler returns through the program's own restorer. */
	.p2align 4
	.globl tp_rt_sig_entry
	.hidden tp_rt_sig_entry
	.type tp_rt_sig_entry, @function
tp_rt_sig_entry:
	.cfi_startproc
	endbr64
	push %rdi
	.cfi_adjust_cfa_offset 8
	push %rsi
	.cfi_adjust_cfa_offset 8
	push %rdx
	.cfi_adjust_cfa_offset 8
	call tp_rt_sig_dispatch
	mov %rdx, %r11
	pop %rdx
	.cfi_adjust_cfa_offset -8
	pop %rsi
	.cfi_adjust_cfa_offset -8
	pop %rdi
	.cfi_adjust_cfa_offset -8
	test %r11, %r11
	jz 1f
	TF_ON
	jmp *%rax
1:	jmp *%rax
	.cfi_endproc
	.size tp_rt_sig_entry, .-tp_rt_sig_entry

	.p2align 4
	.globl tp_rt_noop_handler
	.hidden tp_rt_noop_handler
	.type tp_rt_noop_handler, @function
tp_rt_noop_handler:
	.cfi_startproc
	endbr64
	ret
	.cfi_endproc
	.size tp_rt_noop_handler, .-tp_rt_noop_handler

/* tp_rt_call_handler_tf(handler, sig, si, uc): call a program handler with TF set, from inside
 * the dispatcher's SIGTRAP handler; its return into this function stops the stepping. */
	.p2align 4
	.globl tp_rt_call_handler_tf
	.hidden tp_rt_call_handler_tf
	.type tp_rt_call_handler_tf, @function
tp_rt_call_handler_tf:
	.cfi_startproc
	endbr64
	push %rbx
	.cfi_adjust_cfa_offset 8
	mov %rdi, %rax
	mov %esi, %edi
	mov %rdx, %rsi
	mov %rcx, %rdx
	TF_ON
	call *%rax
	pop %rbx
	.cfi_adjust_cfa_offset -8
	ret
	.cfi_endproc
	.size tp_rt_call_handler_tf, .-tp_rt_call_handler_tf

	.section .note.GNU-stack, "", @progbits
