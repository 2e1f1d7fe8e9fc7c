/* Entry points of the agent that must control EFLAGS.TF exactly: the first instruction the
 * program runs after one of these is the first one counted, and none of the agent's own is. */

#define TF_ON pushfq; orq $0x100, (%rsp); popfq

	.text

/* Constructor: tp_agent_init(argc, argv, envp) returns non-zero to start counting the
 * caller (ld.so) from the instruction after this function's ret. */
	.p2align 4
	.type tp_agent_ctor_entry, @function
tp_agent_ctor_entry:
	.cfi_startproc
	endbr64
	sub $8, %rsp
	.cfi_adjust_cfa_offset 8
	call tp_agent_init
	add $8, %rsp
	.cfi_adjust_cfa_offset -8
	test %eax, %eax
	jz 1f
	TF_ON
1:	ret
	.cfi_endproc
	.size tp_agent_ctor_entry, .-tp_agent_ctor_entry

	.section .init_array, "aw"
	.p2align 3
	.quad tp_agent_ctor_entry
	.text

/* void tracepad_step_begin(void): public, see <tracepad/step.h>. */
	.p2align 4
	.globl tracepad_step_begin
	.type tracepad_step_begin, @function
tracepad_step_begin:
	.cfi_startproc
	endbr64
	sub $8, %rsp
	.cfi_adjust_cfa_offset 8
	call tp_step_begin_c
	add $8, %rsp
	.cfi_adjust_cfa_offset -8
	test %eax, %eax
	jz 1f
	TF_ON
1:	ret
	.cfi_endproc
	.size tracepad_step_begin, .-tracepad_step_begin

/* void tracepad_step_end(void): the stepper stops counting when a thread reaches it. */
	.p2align 4
	.globl tracepad_step_end
	.type tracepad_step_end, @function
tracepad_step_end:
	.cfi_startproc
	endbr64
	ret
	.cfi_endproc
	.size tracepad_step_end, .-tracepad_step_end

/* The int3 a ptrace tracer waits for (TP_CTL_SYNC). */
	.p2align 4
	.globl tp_agent_sync
	.hidden tp_agent_sync
	.type tp_agent_sync, @function
tp_agent_sync:
	.cfi_startproc
	int3
	ret
	.cfi_endproc
	.size tp_agent_sync, .-tp_agent_sync

/* The second int3 (TP_CTL_SYNC2): what ran since the first was the agent's own set-up. */
	.p2align 4
	.globl tp_agent_sync2
	.hidden tp_agent_sync2
	.type tp_agent_sync2, @function
tp_agent_sync2:
	.cfi_startproc
	int3
	ret
	.cfi_endproc
	.size tp_agent_sync2, .-tp_agent_sync2

/* Real handler of every signal the program handles: asks tp_sig_dispatch() for the program's
 * handler and whether to step it, then jumps to it with the kernel's frame untouched, so the
 * handler returns through the program's own restorer. */
	.p2align 4
	.globl tp_sig_entry
	.hidden tp_sig_entry
	.type tp_sig_entry, @function
tp_sig_entry:
	.cfi_startproc
	endbr64
	push %rdi
	.cfi_adjust_cfa_offset 8
	push %rsi
	.cfi_adjust_cfa_offset 8
	push %rdx
	.cfi_adjust_cfa_offset 8
	call tp_sig_dispatch
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
	.size tp_sig_entry, .-tp_sig_entry

	.p2align 4
	.globl tp_noop_handler
	.hidden tp_noop_handler
	.type tp_noop_handler, @function
tp_noop_handler:
	.cfi_startproc
	endbr64
	ret
	.cfi_endproc
	.size tp_noop_handler, .-tp_noop_handler

/* tp_call_handler_tf(handler, sig, si, uc): call a program handler with TF set, from inside
 * the agent's own SIGTRAP handler; its return into this function stops the stepping. */
	.p2align 4
	.globl tp_call_handler_tf
	.hidden tp_call_handler_tf
	.type tp_call_handler_tf, @function
tp_call_handler_tf:
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
	.size tp_call_handler_tf, .-tp_call_handler_tf

/* Restorer of the agent's own SIGTRAP handler. */
	.p2align 4
	.globl tp_restore_rt
	.hidden tp_restore_rt
	.type tp_restore_rt, @function
tp_restore_rt:
	mov $15, %eax
	syscall
	.size tp_restore_rt, .-tp_restore_rt


/* Interposed libc functions (wrap.c): tp_wrap_route(which) picks the target, and whether to
 * set TF first (a stepped thread runs libc's own code, so that it is counted), keeping the
 * caller's argument registers intact. */
#define WRAP(name, which)						\
	.p2align 4;							\
	.globl name;							\
	.type name, @function;						\
name:									\
	.cfi_startproc;							\
	endbr64;							\
	push %rdi; push %rsi; push %rdx; push %rcx; push %r8; push %r9;	\
	sub $8, %rsp;							\
	.cfi_adjust_cfa_offset 56;					\
	mov $which, %edi;						\
	call tp_wrap_route;						\
	mov %rdx, %r11;							\
	add $8, %rsp;							\
	pop %r9; pop %r8; pop %rcx; pop %rdx; pop %rsi; pop %rdi;	\
	.cfi_adjust_cfa_offset -56;					\
	test %r11, %r11;						\
	jz 1f;								\
	TF_ON;								\
	jmp *%rax;							\
1:	jmp *%rax;							\
	.cfi_endproc;							\
	.size name, .-name

	.text
WRAP(sigaction, 0)
WRAP(signal, 1)
WRAP(sigprocmask, 2)
WRAP(pthread_sigmask, 3)

	.section .note.GNU-stack, "", @progbits
