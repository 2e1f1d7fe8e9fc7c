/* The x86-64 code writer: instructions and labels emitted into a caller's buffer at a given
 * runtime address, encoded by Zydis.  Reached through arch/arch.h.  Nothing here allocates
 * or locks, so jump pads and stubs may be written from inside traced programs. */
#ifndef TP_ARCH_X86_64_WRITER_H
#define TP_ARCH_X86_64_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* The int3 instruction (TP_ARCH_INT3, in arch.h) is one byte, so it replaces the first
 * byte of any instruction. */
#define TP_ARCH_INT3_LEN 1
/* syscall (0f 05): its length is what the kernel subtracts from rip to restart one. */
#define TP_ARCH_SYSCALL_LEN 2
/* The 5-byte nop (nopl 0x0(%rax,%rax,1)) that tp_arch_put_nop(w, 5) writes and that
 * <tracepad/tracepoint.h> compiles at a site: an initializer. */
#define TP_ARCH_NOP5                                                                               \
	{                                                                                          \
		0x0f, 0x1f, 0x44, 0x00, 0x00                                                       \
	}
/* jmp rel32 / call rel32: the patchable 5-byte forms. */
#define TP_ARCH_JMP32_LEN 5
#define TP_ARCH_CALL32_LEN 5

/* General-purpose registers by their hardware number. */
enum tp_arch_reg {
	TP_REG_RAX,
	TP_REG_RCX,
	TP_REG_RDX,
	TP_REG_RBX,
	TP_REG_RSP,
	TP_REG_RBP,
	TP_REG_RSI,
	TP_REG_RDI,
	TP_REG_R8,
	TP_REG_R9,
	TP_REG_R10,
	TP_REG_R11,
	TP_REG_R12,
	TP_REG_R13,
	TP_REG_R14,
	TP_REG_R15,
};

/* Conditions of jcc by their encoding (the low nibble of 7x / 0f 8x). */
enum tp_arch_cc {
	TP_CC_O,
	TP_CC_NO,
	TP_CC_B,
	TP_CC_AE,
	TP_CC_E,
	TP_CC_NE,
	TP_CC_BE,
	TP_CC_A,
	TP_CC_S,
	TP_CC_NS,
	TP_CC_P,
	TP_CC_NP,
	TP_CC_L,
	TP_CC_GE,
	TP_CC_LE,
	TP_CC_G,
};

/* Width of a relative branch. */
enum tp_arch_br {
	TP_ARCH_BR_AUTO, /* rel8 when a known target fits, else rel32 (forward labels: rel32) */
	TP_ARCH_BR_8,	 /* rel8 or -ERANGE (for labels: checked when resolved) */
	TP_ARCH_BR_32,
};

#define TP_ARCH_WRITER_LABELS 16
#define TP_ARCH_WRITER_FIXUPS 32

/* A branch to a label not yet bound: its rel field is the @size bytes ending at @end. */
struct tp_arch_fixup {
	uint32_t end;
	uint8_t size;
	uint8_t label;
};

/* The writer: on the caller's stack, fixed tables, no allocation.  Errors are sticky: the
 * first one is kept, later calls do nothing, tp_arch_writer_finish() returns it. */
struct tp_arch_writer {
	uint8_t *buf;
	size_t cap, len;
	uint64_t pc; /* runtime address of buf[0] */
	int err;
	unsigned nlabels, nfixups;
	uint32_t label_at[TP_ARCH_WRITER_LABELS]; /* offset, or UINT32_MAX while unbound */
	struct tp_arch_fixup fixups[TP_ARCH_WRITER_FIXUPS];
};

void tp_arch_writer_init(struct tp_arch_writer *w, void *buf, size_t cap, uint64_t pc);
/* Resolve the label references; *@len (if not NULL) gets the size written.  Returns 0,
 * -ENOSPC (buffer too small), -ERANGE (a target out of reach), -EINVAL (bad operands, an
 * unbound label) or -E2BIG (too many labels or references). */
int tp_arch_writer_finish(struct tp_arch_writer *w, size_t *len);
/* Runtime address of the next instruction. */
static inline uint64_t tp_arch_writer_pc(const struct tp_arch_writer *w)
{
	return w->pc + w->len;
}

/* A new label (>= 0), or -1 with the writer's error set. */
int tp_arch_label_new(struct tp_arch_writer *w);
/* The label stands for the next instruction's address. */
void tp_arch_label_bind(struct tp_arch_writer *w, int label);

void tp_arch_put_jmp(struct tp_arch_writer *w, uint64_t target, enum tp_arch_br width);
void tp_arch_put_jmp_label(struct tp_arch_writer *w, int label, enum tp_arch_br width);
/* jmp qword [rip+0] followed by the 8-byte target: reaches anywhere, 14 bytes. */
void tp_arch_put_jmp_far(struct tp_arch_writer *w, uint64_t target);
void tp_arch_put_jcc(struct tp_arch_writer *w, enum tp_arch_cc cc, uint64_t target,
		     enum tp_arch_br width);
void tp_arch_put_jcc_label(struct tp_arch_writer *w, enum tp_arch_cc cc, int label,
			   enum tp_arch_br width);
void tp_arch_put_call(struct tp_arch_writer *w, uint64_t target);
void tp_arch_put_call_label(struct tp_arch_writer *w, int label);
void tp_arch_put_call_reg(struct tp_arch_writer *w, enum tp_arch_reg r);
void tp_arch_put_ret(struct tp_arch_writer *w);
void tp_arch_put_int3(struct tp_arch_writer *w);
void tp_arch_put_syscall(struct tp_arch_writer *w);
void tp_arch_put_push_reg(struct tp_arch_writer *w, enum tp_arch_reg r);
void tp_arch_put_pop_reg(struct tp_arch_writer *w, enum tp_arch_reg r);
/* Push a 64-bit value without touching registers or flags: push imm32 when the value is
 * its own sign extension, else lea rsp,[rsp-8] and two 32-bit stores. */
void tp_arch_put_push_u64(struct tp_arch_writer *w, uint64_t v);
void tp_arch_put_mov_reg_u64(struct tp_arch_writer *w, enum tp_arch_reg r, uint64_t v);
/* lea rsp, [rsp+@delta]: moves the stack (past the red zone) without changing flags. */
void tp_arch_put_lea_rsp(struct tp_arch_writer *w, int32_t delta);
/* @n bytes of the longest nops (5: nop dword [rax+rax*1+0], the patchable site of markers). */
void tp_arch_put_nop(struct tp_arch_writer *w, size_t n);
/* Raw data (addresses for jmp_far, records): not instructions. */
void tp_arch_put_data(struct tp_arch_writer *w, const void *data, size_t n);

/* Encode "jmp rel32" from @from to @to into 5 bytes at @out; -ERANGE if out of reach. */
int tp_arch_emit_jmp(uint8_t out[5], uint64_t from, uint64_t to);
/* Encode "call rel32" from @from to @to into 5 bytes at @out; -ERANGE if out of reach. */
int tp_arch_emit_call(uint8_t out[5], uint64_t from, uint64_t to);
/* Encode "syscall" into 2 bytes at @out (injection into a stopped thread). */
int tp_arch_emit_syscall(uint8_t out[2]);
/* Encode at @at "call @fn; int3" (a function-call injection: the int3 stops the thread once
 * the function returns; its address is at + 5).  @cap >= 6; *@len gets 6. */
int tp_arch_emit_call_int3(uint8_t *out, size_t cap, uint64_t at, uint64_t fn, size_t *len);

#endif
