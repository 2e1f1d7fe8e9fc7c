/* The counter's templates for per-block counters (rt-count.c): each block adds 1 to its
 * slot in the thread's counters, each rep string instruction its iterations to its own,
 * while the thread counts (its "on" word, 0 outside regions).  No flag is touched where
 * flags may be live (jrcxz, lea); the whole-program count's templates are rt-entry.S's.
 * ON and SLOT are placeholders, patched with %gs offsets as a block is translated. */
#include "dbt/rt-abi.h"

#define ON 0x5a5a0f01
#define SLOT 0x5a5a0f02

	.section .rodata
.macro TPL name
	.globl tp_dbt_tpl_\name
	.hidden tp_dbt_tpl_\name
tp_dbt_tpl_\name:
.endm

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
	mov %gs:TP_DBT_T_RCX0, %rax
	mov %rcx, %rdx
	not %rdx
	lea 1(%rax,%rdx), %rax
	lea -1(%rax), %rdx
	bswap %rdx
	movzbl %dl, %edx
	lea 1(%edx), %edx
	movzbl %dh, %edx
	lea (%rax,%rdx), %rax
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

	.section .note.GNU-stack, "", @progbits
