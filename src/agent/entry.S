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

/* Interposed libc functions (src/rt/wrap.c): tp_rt_wrap_route(which) picks the target, and whether to
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
	call tp_rt_wrap_route;						\
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
