/* The architecture contract: generic code includes this header, never a file under
 * arch/x86_64/ directly.  Decoding allocates nothing and is async-signal-safe, so the
 * agent may call it from its SIGTRAP handler. */
#ifndef TP_ARCH_ARCH_H
#define TP_ARCH_ARCH_H

#include <stddef.h>
#include <stdint.h>

#define TP_ARCH_MAX_INSN_LEN 15
#define TP_ARCH_INT3 0xcc /* the one-byte breakpoint instruction */

/* Control-flow kind of an instruction. */
enum tp_insn_kind {
	TP_INSN_OTHER = 0, /* falls through to the next instruction */
	TP_INSN_JMP,	   /* unconditional jump */
	TP_INSN_JCC,	   /* conditional jump, loop, jrcxz */
	TP_INSN_CALL,
	TP_INSN_RET,
	TP_INSN_SYSCALL, /* syscall, sysenter, int 0x80 */
	TP_INSN_INT3,
	TP_INSN_INT, /* other software interrupts, ud2, hlt: traps */
};

/* Flags of struct tp_insn. */
#define TP_INSN_F_INDIRECT 0x01 /* branch target comes from a register or memory */
#define TP_INSN_F_RIPREL 0x02	/* has a RIP-relative memory operand */
#define TP_INSN_F_REP 0x04	/* rep/repe/repne prefixed string instruction */
#define TP_INSN_F_RELBR 0x08	/* relative branch: target is valid */

struct tp_insn {
	uint8_t len;
	uint8_t kind;	     /* enum tp_insn_kind */
	uint8_t flags;	     /* TP_INSN_F_* */
	uint8_t disp_offset; /* RIP-relative: offset of the disp32 in the bytes */
	uint8_t imm_offset;  /* relative branch: offset of the rel8/rel32 in the bytes */
	uint8_t imm_size;    /* relative branch: 1 or 4 */
	uint16_t mnemonic;   /* tp_arch_mnemonic_name() gives its name */
	uint64_t target;     /* relative branch target, or RIP-relative operand address */
};

/* Decode one instruction at runtime address @addr from @len bytes at @buf.
 * Returns 0, or -EINVAL when the bytes are no valid instruction (or are cut short). */
int tp_arch_decode(const void *buf, size_t len, uint64_t addr, struct tp_insn *out);

/* Name of a mnemonic id ("mov", "rep movsb" is "movsb" with TP_INSN_F_REP); never NULL. */
const char *tp_arch_mnemonic_name(unsigned mnemonic);
/* Number of mnemonic ids: every id is below this. */
unsigned tp_arch_mnemonic_count(void);

/* Intel-syntax text of one instruction into @out; returns 0 or -EINVAL. */
int tp_arch_format(const void *buf, size_t len, uint64_t addr, char *out, size_t outlen);

/* Copy one instruction from runtime address @from to @to keeping its meaning: RIP-relative
 * displacements are adjusted, relative jumps and jcc are re-encoded with rel32, a relative
 * call becomes push of the original return address + jmp.  The copy falls through to
 * @to + *outlen; the caller appends a jump back when needed.
 * Returns 0, -ERANGE when a displacement cannot reach from @to, -ENOTSUP for instructions
 * that cannot run elsewhere, -EINVAL for bad input, -ENOSPC when @outcap is too small. */
int tp_arch_relocate(const void *buf, size_t len, uint64_t from, uint64_t to, uint8_t *out,
		     size_t outcap, size_t *outlen);

/* Encode "jmp rel32" from @from to @to into 5 bytes at @out; -ERANGE if out of reach. */
int tp_arch_emit_jmp(uint8_t out[5], uint64_t from, uint64_t to);

/* The record of a call returning without a stop, filled by its return stub (offsets). */
#define TP_RSTUB_DONE 0	     /* u32: 1 once the call returned (written last) */
#define TP_RSTUB_RET 8	     /* u64: where the call returns to (written at entry) */
#define TP_RSTUB_ERRNO_AT 16 /* u64: the thread's errno, or any readable word (at entry) */
#define TP_RSTUB_RAX 24	     /* u64, and the rest as the call returned */
#define TP_RSTUB_RDX 32
#define TP_RSTUB_XMM0 40
#define TP_RSTUB_TSC 48	  /* u64: the time stamp counter */
#define TP_RSTUB_ERRNO 56 /* i32 */
#define TP_RSTUB_REC_SIZE 64

/* Encode at @out (room for @cap bytes) the return stub that will run at @at for the record
 * at @rec: entered by a function's "ret" (its return address was replaced by @at), it
 * saves rax, rdx, xmm0, the TSC and errno into the record, puts every register back, pushes
 * the real return address, sets "done" and returns there.  No flag or register changes,
 * nothing written below the stack pointer but the return address's own slot.  *@len gets
 * its size.  Returns 0, -ENOSPC or -EINVAL. */
int tp_arch_emit_return_stub(uint8_t *out, size_t cap, uint64_t at, uint64_t rec, size_t *len);

#endif
