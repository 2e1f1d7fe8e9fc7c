/* Does a function look at its own return address?  A tracer that replaces the return
 * address (a return trampoline or stub) would change what such a function sees: glibc's
 * dlsym, dlopen and dl_iterate_phdr pick the caller's object from it. */
#include <stdbool.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/decode-priv.h"

/* Instructions followed from the entry: glibc's dl_iterate_phdr reads its slot at the
 * 20th, after six pushes and a call. */
#define SCAN_INSNS 64

/* Is @op an access (not an address computation) to [entry rsp], given the offsets of rsp
 * and rbp from the entry's rsp? */
static bool hits_slot(const ZydisDecodedOperand *op, int64_t rsp, bool rbp_known, int64_t rbp)
{
	if (op->type != ZYDIS_OPERAND_TYPE_MEMORY || op->mem.type != ZYDIS_MEMOP_TYPE_MEM ||
	    op->mem.index != ZYDIS_REGISTER_NONE || op->mem.segment == ZYDIS_REGISTER_FS ||
	    op->mem.segment == ZYDIS_REGISTER_GS)
		return false;
	if (op->mem.base == ZYDIS_REGISTER_RSP)
		return rsp + op->mem.disp.value == 0;
	if (op->mem.base == ZYDIS_REGISTER_RBP && rbp_known)
		return rbp + op->mem.disp.value == 0;
	return false;
}

/* An immediate operand's value, for add/sub rsp. */
static bool imm_of(const ZydisDecodedInstruction *in, const ZydisDecodedOperand *ops, int64_t *v)
{
	for (unsigned i = 0; i < in->operand_count_visible; i++)
		if (ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
			*v = ops[i].imm.value.s;
			return true;
		}
	return false;
}

static bool writes_reg(const ZydisDecodedInstruction *in, const ZydisDecodedOperand *ops,
		       ZydisRegister reg)
{
	for (unsigned i = 0; i < in->operand_count; i++)
		if (ops[i].type == ZYDIS_OPERAND_TYPE_REGISTER && ops[i].reg.value == reg &&
		    (ops[i].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE))
			return true;
	return false;
}

/* Follows the fall-through path (and direct jumps) from the entry, keeping rsp's offset from
 * the entry's (push, pop, add and sub of an immediate) and rbp's once it is a copy of rsp;
 * whatever else sets rsp ends the scan. */
bool tp_arch_reads_return_slot(const void *code, size_t len, uint64_t addr)
{
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	ZydisDecodedInstruction in;
	const uint8_t *p = code;
	int64_t rsp = 0, rbp = 0, v;
	bool rbp_known = false;
	size_t off = 0;

	for (int n = 0; n < SCAN_INSNS && off < len; n++) {
		bool rsp_op;

		if (tp_arch_decode_zydis(p + off, len - off, &in, ops))
			return false;
		for (unsigned i = 0; i < in.operand_count_visible; i++)
			if (hits_slot(&ops[i], rsp, rbp_known, rbp))
				return true;
		rsp_op = ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
			 ops[0].reg.value == ZYDIS_REGISTER_RSP;
		switch (in.mnemonic) {
		case ZYDIS_MNEMONIC_RET:
		case ZYDIS_MNEMONIC_HLT:
		case ZYDIS_MNEMONIC_UD2:
			return false;
		case ZYDIS_MNEMONIC_JMP:
			/* A jump on in the same frame, or a tail call: follow a direct one. */
			if (ops[0].type != ZYDIS_OPERAND_TYPE_IMMEDIATE)
				return false;
			v = (int64_t)(off + in.length) + ops[0].imm.value.s;
			if (v < 0 || (uint64_t)v >= len)
				return false;
			off = (size_t)v;
			continue;
		case ZYDIS_MNEMONIC_PUSH:
			rsp -= in.operand_width / 8;
			break;
		case ZYDIS_MNEMONIC_POP:
			rsp += in.operand_width / 8;
			if (rsp_op)
				return false;
			if (writes_reg(&in, ops, ZYDIS_REGISTER_RBP))
				rbp_known = false;
			break;
		case ZYDIS_MNEMONIC_CALL:
			break;
		case ZYDIS_MNEMONIC_SUB:
		case ZYDIS_MNEMONIC_ADD:
			if (rsp_op && imm_of(&in, ops, &v)) {
				rsp += in.mnemonic == ZYDIS_MNEMONIC_SUB ? -v : v;
				break;
			}
			goto other;
		case ZYDIS_MNEMONIC_MOV:
			if (ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
			    ops[0].reg.value == ZYDIS_REGISTER_RBP &&
			    ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER &&
			    ops[1].reg.value == ZYDIS_REGISTER_RSP) {
				rbp = rsp;
				rbp_known = true;
				break;
			}
			goto other;
		default:
		other:
			/* Anything else that sets rsp (and, lea, leave, mov) ends what is
			 * known. */
			if (writes_reg(&in, ops, ZYDIS_REGISTER_RSP))
				return false;
			if (writes_reg(&in, ops, ZYDIS_REGISTER_RBP))
				rbp_known = false;
			break;
		}
		off += in.length;
	}
	return false;
}
