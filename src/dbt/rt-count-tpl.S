/* The counter's templates for per-block counters (rt-count.c): each block adds 1 to its
 * slot in the thread's counters, each rep string instruction its iterations to its own,
 * while the thread counts (its "on" word, 0 outside regions).  No flag is touched where
 * flags may be live (jrcxz, lea); the whole-program count's templates are rt-entry.S's.
 * ON and SLOT are placeholders, patched with %gs offsets as a block is translated. */
#include "dbt/rt-abi.h"
#include "dbt/rt-tpl.h"

#define ON 0x5a5a0f01
#define SLOT 0x5a5a0f02
#define LIMIT 0x5a5a0f03
#define TARGET 0x5a5a0f04
#define BELOW 0x5a5a0f05
#define REASON 0x5a5a0f06

	.section .rodata

/* slot += 1 where the block's first instructions write every status flag first */
TPL bc_add
	mov %rcx, %gs:TP_DBT_T_RCX0
	mov %gs:ON, %rcx
	jrcxz 1f
	addq $1, %gs:SLOT
1:	mov %gs:TP_DBT_T_RCX0, %rcx
TPL bc_add_end

/* slot += 1, flags untouched: a handler that interrupts the read-add-store gets its own
 * additions to the slot back at its sigreturn (rt-count.c, count_signal) */
TPL bc_lea
	mov %rcx, %gs:TP_DBT_T_RCX0
	mov %gs:ON, %rcx
	jrcxz 1f
	mov %gs:SLOT, %rcx
	lea 1(%rcx), %rcx
	mov %rcx, %gs:SLOT
1:	mov %gs:TP_DBT_T_RCX0, %rcx
TPL bc_lea_end

/* after a rep string instruction (rt-entry.S's rep_pre before it): its slot +=
 * max(rcx before - rcx after, 1) */
TPL brep_post
	mov %rax, %gs:TP_DBT_T_RAX
	mov %rdx, %gs:TP_DBT_T_RDX
	REP_DONE
	mov %rcx, %gs:TP_DBT_T_RCX0
	mov %gs:ON, %rcx
	jrcxz 1f
	mov %gs:SLOT, %rdx
	lea (%rax,%rdx), %rax
	mov %rax, %gs:SLOT
1:	mov %gs:TP_DBT_T_RCX0, %rcx
	mov %gs:TP_DBT_T_RDX, %rdx
	mov %gs:TP_DBT_T_RAX, %rax
TPL brep_post_end

/* Before an indirect branch's lookup (rax: the program's target, its rax in gs:RAX, rsp
 * the target's) in a --start region: a stack pointer at or above the region's limit (the
 * frame of its call popped) calls the runtime, which tests whether the region returned.
 * rsp - limit >= 0 is read from its top byte (bswap, a 256-byte table: no flag). */
TPL rck
	mov %rcx, %gs:TP_DBT_T_IBL_RCX
	mov %rdx, %gs:TP_DBT_T_IBL_RDX
	mov %gs:LIMIT, %rdx
	not %rdx
	lea 1(%rsp,%rdx), %rcx
	bswap %rcx
	movzbl %cl, %ecx
	movzbl %gs:BELOW(%rcx), %ecx
	mov %gs:TP_DBT_T_IBL_RDX, %rdx
	jrcxz 1f
	mov %gs:TP_DBT_T_IBL_RCX, %rcx
	jmp 2f
1:	mov %gs:TP_DBT_T_IBL_RCX, %rcx
	mov %rax, %gs:TARGET
	mov %gs:TP_DBT_T_RAX, %rax
	/* the gate's template, with the client's reason */
	mov %rax, %gs:TP_DBT_T_RAX
	movq $REASON, %gs:TP_DBT_T_ARG
	lea 3f(%rip), %rax
	jmp *%gs:TP_DBT_T_GATE
3:	mov %rax, %gs:TP_DBT_T_RAX
	mov %gs:TARGET, %rax
2:
TPL rck_end

	.section .note.GNU-stack, "", @progbits
