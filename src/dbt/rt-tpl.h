/* Assembler macros shared by the runtime's templates (rt-entry.S, rt-count-tpl.S): code
 * copied into the cache, whose labels mark where the translator patches a field. */
#ifndef TP_DBT_RT_TPL_H
#define TP_DBT_RT_TPL_H
#ifdef __ASSEMBLER__
#include "dbt/rt-abi.h"

/* tp_dbt_tpl_NAME: a template's start, or a point in it, for rt-*.c */
.macro TPL name
	.globl tp_dbt_tpl_\name
	.hidden tp_dbt_tpl_\name
tp_dbt_tpl_\name:
.endm

/* After a rep string instruction (rcx before it in gs:RCX0, the program's rax and rdx
 * saved): rax = max(rcx before - rcx after, 1), flags untouched (bswap and movzx of dh
 * instead of a compare); rdx is clobbered. */
.macro REP_DONE
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
.endm

#endif
#endif
