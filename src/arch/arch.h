/* The architecture contract: generic code includes this header, never a file under
 * arch/x86_64/ directly.  Decoding allocates nothing and is async-signal-safe, so the
 * agent may call it from its SIGTRAP handler. */
#ifndef TP_ARCH_ARCH_H
#define TP_ARCH_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TP_ARCH_MAX_INSN_LEN 15
#define TP_ARCH_INT3 0xcc /* the breakpoint instruction, one byte */
#define TP_ARCH_NOP1 0x90 /* the one-byte no-op */

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
/* A single-step over it may run the next instruction too: KVM emulates cpuid and delivers the
 * step trap one instruction late (seen on these VMs; bare metal traps at once). */
#define TP_INSN_F_LATE_STEP 0x10

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

/* Does the function at runtime address @addr (@len bytes of its code at @code) read or write
 * its return address slot in its first instructions ([rsp] before any push, 8(%rsp) after
 * one, 8(%rbp) after push %rbp; mov %rsp,%rbp, ...)?  Such a function (glibc's dlsym, dlopen,
 * dl_iterate_phdr) must find the real return address there. */
bool tp_arch_reads_return_slot(const void *code, size_t len, uint64_t addr);

/* The code writer (struct tp_arch_writer, tp_arch_put_*, tp_arch_emit_*) and the ABI facts. */
#include "arch/x86_64/writer.h"
#include "arch/x86_64/abi.h"

/* Copy one instruction from runtime address @from to @to keeping its meaning: RIP-relative
 * displacements are adjusted, relative jumps and jcc are re-encoded with rel32, a relative
 * call becomes push of the original return address + jmp.  The copy falls through to
 * @to + *outlen; the caller appends a jump back when needed.
 * Returns 0, -ERANGE when a displacement cannot reach from @to, -ENOTSUP for instructions
 * that cannot run elsewhere, -EINVAL for bad input, -ENOSPC when @outcap is too small. */
int tp_arch_relocate(const void *buf, size_t len, uint64_t from, uint64_t to, uint8_t *out,
		     size_t outcap, size_t *outlen);

/* Why tp_arch_relocate_n() refused. */
enum tp_arch_reloc_why {
	TP_RELOC_OK = 0,
	TP_RELOC_DECODE,      /* -EINVAL: bytes that are no instruction, or cut short */
	TP_RELOC_FUNC_END,    /* -ENOTSUP: the instructions run past the function's end */
	TP_RELOC_BRANCH_INTO, /* -EBUSY: a branch of the function lands inside the range */
	TP_RELOC_UNMOVABLE,   /* -ENOTSUP: an instruction that cannot run elsewhere */
	TP_RELOC_REACH,	      /* -ERANGE: a target out of rel32/disp32 reach of the copy */
	TP_RELOC_SPACE,	      /* -ENOSPC: the writer's buffer is full */
};

/* The function around a range: its bytes, scanned for branches into the range. */
struct tp_arch_fn {
	const void *code;
	size_t len;
	uint64_t addr;
};

struct tp_arch_reloc {
	size_t covered;	   /* bytes of original code moved: >= n, on an instruction boundary */
	unsigned ninsn;	   /* instructions moved */
	int falls_through; /* the copy continues at from + covered: append a jump back */
	int why;	   /* enum tp_arch_reloc_why */
	uint64_t where;	   /* refused: the address of the instruction that is the reason */
};

/* Relocate whole instructions from runtime address @from (@code_len bytes at @code, at least
 * @n + 14 when available) until @n bytes are covered, writing at the writer's position.
 * @fn (may be NULL: then only branches within the range are checked) bounds the function so
 * that a range some branch jumps into is refused.  Returns 0 or the -errno of res->why; the
 * writer's content is then undefined.  Branches through registers or tables are not seen. */
int tp_arch_relocate_n(struct tp_arch_writer *w, const void *code, size_t code_len, uint64_t from,
		       size_t n, const struct tp_arch_fn *fn, struct tp_arch_reloc *res);

/* Where a return stub finds and leaves things in its record: byte offsets, chosen by the
 * caller that maps and reads the records (src/bp). */
struct tp_arch_rstub_layout {
	uint32_t done;	   /* u32 set to 1 last */
	uint32_t ret;	   /* u64: the real return address, read */
	uint32_t errno_at; /* u64: address of the thread's errno (or any readable word), read */
	uint32_t rax, rdx, xmm0, tsc; /* u64 each, written */
	uint32_t err;		      /* i32: errno, written */
	uint32_t entry_to;	      /* u64: where the entry stub goes on, read */
	uint32_t entry_tsc;	      /* u64: the TSC at the call's start, written */
};

/* Encode at @out (room for @cap bytes) the return stub that will run at @at for the record
 * at @rec laid out as @l: entered by a function's "ret" (its return address was replaced by
 * @at), it saves rax, rdx, xmm0, the TSC and errno into the record, puts every register
 * back, pushes the real return address, sets "done" and returns there.  No flag or register
 * changes, nothing written below the stack pointer but the return address's own slot.
 * *@len gets its size.  Returns 0, -ENOSPC or -EINVAL. */
int tp_arch_emit_return_stub(uint8_t *out, size_t cap, uint64_t at, uint64_t rec,
			     const struct tp_arch_rstub_layout *l, size_t *len);

/* The same record's entry stub, at @at: where the thread runs on from a function's entry
 * stop, it puts the TSC into the record (the call's start as the program lives it, whatever
 * the thread waited for a CPU after the stop) and jumps to the record's entry_to (the
 * displaced instruction's slot).  rax and rdx pass through the record's rax and rdx words;
 * no flag or register changes, no stack used. */
int tp_arch_emit_entry_stub(uint8_t *out, size_t cap, uint64_t at, uint64_t rec,
			    const struct tp_arch_rstub_layout *l, size_t *len);

#endif
