/* Tracepoint expressions compiled to a compact stack bytecode, and its evaluator.  The
 * evaluator is freestanding (no malloc, no libc beyond memcpy, memory through a callback)
 * so that the agent can run the same code for fast tracepoints; the compiler (expr.c) runs
 * in the tracer and resolves registers, DWARF variables and types once, at the tracepoint's
 * pc, so that nothing but integer arithmetic and loads is left for each hit. */
#ifndef TP_TRACEPT_EXPR_H
#define TP_TRACEPT_EXPR_H

#include <stddef.h>
#include <stdint.h>

/* Opcodes: one byte, then the immediates named.  Values are 64-bit integers on a stack of
 * at most TP_EXPR_STACK entries; comparisons push 0 or 1. */
enum tp_expr_op {
	TP_OP_END = 0, /* result: the top of the stack */
	TP_OP_CONST,   /* imm: 8 bytes */
	TP_OP_REG,     /* imm: 1 byte, index of the register in struct user_regs_struct */
	TP_OP_LOAD,    /* imm: 1 byte, size (1, 2, 4, 8) | TP_EXPR_SIGNED: pop addr, push value */
	TP_OP_EXT,     /* imm: 1 byte, size | TP_EXPR_SIGNED: truncate, zero or sign extend */
	TP_OP_ADD,
	TP_OP_SUB,
	TP_OP_MUL,
	TP_OP_DIVS,
	TP_OP_DIVU,
	TP_OP_MODS,
	TP_OP_MODU,
	TP_OP_AND,
	TP_OP_OR,
	TP_OP_XOR,
	TP_OP_SHL,
	TP_OP_SHRS,
	TP_OP_SHRU,
	TP_OP_EQ,
	TP_OP_NE,
	TP_OP_LTS,
	TP_OP_LTU,
	TP_OP_LES,
	TP_OP_LEU,
	TP_OP_NEG,
	TP_OP_NOT,
	TP_OP_LNOT,
	TP_OP_JZ,  /* imm: 2 bytes, forward offset from the next op: pop, jump if zero */
	TP_OP_JNZ, /* same, jump if not zero */
	TP_OP_JMP, /* imm: 2 bytes, forward offset from the next op */
	TP_OP_COUNT
};

#define TP_EXPR_SIGNED 0x80
#define TP_EXPR_STACK 32
#define TP_EXPR_MAX_CODE 1024

/* Read @len bytes at @addr of the traced program: 0 or -errno. */
typedef int (*tp_expr_read_fn)(void *arg, uint64_t addr, void *buf, size_t len);

/* Evaluate @code (@len bytes) over @regs (struct user_regs_struct as 27 words).  Returns 0
 * with *@out, -EFAULT when a read failed (its address in *@fault, may be NULL), -EDOM on a
 * division by zero, -EINVAL for malformed code (checked as it runs: the agent may be handed
 * anything). */
int tp_expr_eval(const uint8_t *code, size_t len, const uint64_t *regs, tp_expr_read_fn read,
		 void *arg, uint64_t *out, uint64_t *fault);

/* Whether @code (@len bytes, as tp_expr_eval takes it) reads register @reg (TP_UREG_*):
 * the agent fills the registers it cannot copy from a pad (fs_base, gs_base) only then. */
int tp_expr_reads_reg(const uint8_t *code, size_t len, unsigned reg);

/* Index of the registers in struct user_regs_struct, as TP_OP_REG takes them. */
enum tp_expr_reg {
	TP_UREG_R15,
	TP_UREG_R14,
	TP_UREG_R13,
	TP_UREG_R12,
	TP_UREG_RBP,
	TP_UREG_RBX,
	TP_UREG_R11,
	TP_UREG_R10,
	TP_UREG_R9,
	TP_UREG_R8,
	TP_UREG_RAX,
	TP_UREG_RCX,
	TP_UREG_RDX,
	TP_UREG_RSI,
	TP_UREG_RDI,
	TP_UREG_ORIG_RAX,
	TP_UREG_RIP,
	TP_UREG_CS,
	TP_UREG_EFLAGS,
	TP_UREG_RSP,
	TP_UREG_SS,
	TP_UREG_FS_BASE,
	TP_UREG_GS_BASE,
	TP_UREG_DS,
	TP_UREG_ES,
	TP_UREG_FS,
	TP_UREG_GS,
	TP_UREG_COUNT
};

#endif
