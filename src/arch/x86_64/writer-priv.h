/* Zydis-level entry of the code writer, for the x86-64 files of src/arch (stubs, relocator):
 * any instruction Zydis's encoder takes, with absolute addresses for RIP-relative operands. */
#ifndef TP_ARCH_X86_64_WRITER_PRIV_H
#define TP_ARCH_X86_64_WRITER_PRIV_H

#include <Zydis/Zydis.h>

#include "arch/arch.h"

/* Operands of one request: registers, [rip + absolute address], [base], immediates. */
#define TP_OP_REG(r) ((ZydisEncoderOperand){.type = ZYDIS_OPERAND_TYPE_REGISTER, .reg.value = (r)})
#define TP_OP_IMM(v) ((ZydisEncoderOperand){.type = ZYDIS_OPERAND_TYPE_IMMEDIATE, .imm.u = (v)})
#define TP_OP_RIPMEM(a, sz)                                                                        \
	((ZydisEncoderOperand){                                                                    \
	    .type = ZYDIS_OPERAND_TYPE_MEMORY,                                                     \
	    .mem = {.base = ZYDIS_REGISTER_RIP, .displacement = (ZyanI64)(a), .size = (sz)}})
#define TP_OP_MEM(r, d, sz)                                                                        \
	((ZydisEncoderOperand){.type = ZYDIS_OPERAND_TYPE_MEMORY,                                  \
			       .mem = {.base = (r), .displacement = (d), .size = (sz)}})

/* Encode one instruction at the writer's position.  RIP-relative displacements and relative
 * branch immediates are absolute addresses here; @width forces a branch width
 * (ZYDIS_BRANCH_WIDTH_NONE lets Zydis choose). */
void tp_arch_put_op(struct tp_arch_writer *w, ZydisMnemonic m, ZydisBranchWidth width,
		    unsigned nops, const ZydisEncoderOperand *ops);

#define TP_PUT(w, m, ...)                                                                          \
	do {                                                                                       \
		const ZydisEncoderOperand ops_[] = {__VA_ARGS__};                                  \
		tp_arch_put_op(w, m, ZYDIS_BRANCH_WIDTH_NONE, sizeof(ops_) / sizeof(ops_[0]),      \
			       ops_);                                                              \
	} while (0)
#define TP_PUT0(w, m) tp_arch_put_op(w, m, ZYDIS_BRANCH_WIDTH_NONE, 0, NULL)

/* The Zydis mnemonic of jcc @cc. */
ZydisMnemonic tp_arch_jcc_mnemonic(enum tp_arch_cc cc);
/* The condition of a jcc mnemonic, or -1 when @m is none. */
int tp_arch_jcc_cc(ZydisMnemonic m);

#endif
