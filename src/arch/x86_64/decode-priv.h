/* Zydis-level decoding shared by the x86-64 files of src/arch (not part of the arch
 * contract: generic code uses arch/arch.h). */
#ifndef TP_ARCH_X86_64_DECODE_PRIV_H
#define TP_ARCH_X86_64_DECODE_PRIV_H

#include <stddef.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"

/* Decode one 64-bit-mode instruction with all its operands; 0 or -EINVAL. */
int tp_arch_decode_zydis(const void *buf, size_t len, ZydisDecodedInstruction *insn,
			 ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT]);

/* Fill @out from a decoded instruction at runtime address @addr; 0 or -EINVAL. */
int tp_arch_insn_from_zydis(const ZydisDecodedInstruction *insn, const ZydisDecodedOperand *ops,
			    uint64_t addr, struct tp_insn *out);

#endif
