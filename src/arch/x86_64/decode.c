/* x86-64 instruction decoding for tracepad: a thin Zydis wrapper that reduces an instruction
 * to what tracers, the relocator and the code cache need (length, control-flow kind,
 * RIP-relative and branch offsets).  Everything here runs from signal handlers. */
#include <errno.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/decode-priv.h"

/*
 * ZydisDecoderInit only stores a handful of fields (measured: a few ns), so each call builds
 * its own decoder on the stack.  A shared static decoder would need an initialisation
 * protocol that is safe against a signal arriving half way; this needs none.
 */
int tp_arch_decode_zydis(const void *buf, size_t len, ZydisDecodedInstruction *insn,
			 ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT])
{
	ZydisDecoder dec;

	if (!buf || !len)
		return -EINVAL;
	if (ZYAN_FAILED(ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64)))
		return -EINVAL;
	if (ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, buf, len, insn, ops)))
		return -EINVAL;
	return 0;
}

static int is_string_op(const ZydisDecodedInstruction *insn)
{
	return insn->meta.category == ZYDIS_CATEGORY_STRINGOP ||
	       insn->meta.category == ZYDIS_CATEGORY_IOSTRINGOP;
}

static uint8_t kind_of(const ZydisDecodedInstruction *insn, const ZydisDecodedOperand *ops)
{
	switch (insn->mnemonic) {
	case ZYDIS_MNEMONIC_JMP:
		return TP_INSN_JMP;
	case ZYDIS_MNEMONIC_CALL:
		return TP_INSN_CALL;
	/* iret and far ret also take their target from the stack, like ret. */
	case ZYDIS_MNEMONIC_RET:
	case ZYDIS_MNEMONIC_IRET:
	case ZYDIS_MNEMONIC_IRETD:
	case ZYDIS_MNEMONIC_IRETQ:
		return TP_INSN_RET;
	case ZYDIS_MNEMONIC_SYSCALL:
	case ZYDIS_MNEMONIC_SYSENTER:
		return TP_INSN_SYSCALL;
	case ZYDIS_MNEMONIC_INT3:
		return TP_INSN_INT3;
	case ZYDIS_MNEMONIC_INT:
		/* int 0x80 is the legacy 32-bit system call gate, still usable from 64-bit code. */
		if (ops[0].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[0].imm.value.u == 0x80)
			return TP_INSN_SYSCALL;
		return TP_INSN_INT;
	case ZYDIS_MNEMONIC_INT1:
	case ZYDIS_MNEMONIC_INTO:
	case ZYDIS_MNEMONIC_UD0:
	case ZYDIS_MNEMONIC_UD1:
	case ZYDIS_MNEMONIC_UD2:
	case ZYDIS_MNEMONIC_HLT:
		return TP_INSN_INT;
	default:
		break;
	}
	/* jcc, loop*, jrcxz/jecxz. */
	if (insn->meta.category == ZYDIS_CATEGORY_COND_BR)
		return TP_INSN_JCC;
	return TP_INSN_OTHER;
}

int tp_arch_insn_from_zydis(const ZydisDecodedInstruction *insn, const ZydisDecodedOperand *ops,
			    uint64_t addr, struct tp_insn *out)
{
	ZyanU64 abs;

	memset(out, 0, sizeof(*out));
	out->len = insn->length;
	out->mnemonic = (uint16_t)insn->mnemonic;
	out->kind = kind_of(insn, ops);

	/* Zydis sets HAS_REP* only where the prefix is effective; "rep ret" or "bnd jmp" are not
	 * string instructions and stay unflagged. */
	if ((insn->attributes &
	     (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) &&
	    is_string_op(insn))
		out->flags |= TP_INSN_F_REP;
	if (insn->mnemonic == ZYDIS_MNEMONIC_CPUID)
		out->flags |= TP_INSN_F_LATE_STEP;

	for (unsigned i = 0; i < insn->operand_count; i++) {
		const ZydisDecodedOperand *op = &ops[i];

		if (op->type == ZYDIS_OPERAND_TYPE_MEMORY &&
		    (op->mem.base == ZYDIS_REGISTER_RIP || op->mem.base == ZYDIS_REGISTER_EIP)) {
			if (ZYAN_FAILED(ZydisCalcAbsoluteAddress(insn, op, addr, &abs)))
				return -EINVAL;
			out->flags |= TP_INSN_F_RIPREL;
			out->disp_offset = insn->raw.disp.offset;
			out->target = abs;
		}
	}

	if (insn->attributes & ZYDIS_ATTRIB_IS_RELATIVE) {
		for (unsigned i = 0; i < 2; i++) {
			if (!insn->raw.imm[i].is_relative)
				continue;
			out->imm_offset = insn->raw.imm[i].offset;
			out->imm_size = insn->raw.imm[i].size / 8;
			out->flags |= TP_INSN_F_RELBR;
			break;
		}
		/* Zydis's arithmetic knows the operand-size rules (rel16 forms wrap at 64 KiB). */
		for (unsigned i = 0; i < insn->operand_count_visible; i++) {
			if (ops[i].type != ZYDIS_OPERAND_TYPE_IMMEDIATE || !ops[i].imm.is_relative)
				continue;
			if (ZYAN_FAILED(ZydisCalcAbsoluteAddress(insn, &ops[i], addr, &abs)))
				return -EINVAL;
			out->target = abs;
			break;
		}
	}

	if ((out->kind == TP_INSN_JMP || out->kind == TP_INSN_CALL) &&
	    !(out->flags & TP_INSN_F_RELBR))
		out->flags |= TP_INSN_F_INDIRECT;
	return 0;
}

int tp_arch_decode(const void *buf, size_t len, uint64_t addr, struct tp_insn *out)
{
	ZydisDecodedInstruction insn;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	int err;

	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	err = tp_arch_decode_zydis(buf, len, &insn, ops);
	if (err)
		return err;
	return tp_arch_insn_from_zydis(&insn, ops, addr, out);
}

const char *tp_arch_mnemonic_name(unsigned mnemonic)
{
	const char *s;

	if (mnemonic > ZYDIS_MNEMONIC_MAX_VALUE)
		return "invalid";
	s = ZydisMnemonicGetString((ZydisMnemonic)mnemonic);
	return s ? s : "invalid";
}

unsigned tp_arch_mnemonic_count(void)
{
	return ZYDIS_MNEMONIC_MAX_VALUE + 1;
}

int tp_arch_format(const void *buf, size_t len, uint64_t addr, char *out, size_t outlen)
{
	ZydisDecodedInstruction insn;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	ZydisFormatter fmt;
	int err;

	if (!out || !outlen)
		return -EINVAL;
	out[0] = '\0';
	err = tp_arch_decode_zydis(buf, len, &insn, ops);
	if (err)
		return err;
	if (ZYAN_FAILED(ZydisFormatterInit(&fmt, ZYDIS_FORMATTER_STYLE_INTEL)))
		return -EINVAL;
	if (ZYAN_FAILED(ZydisFormatterFormatInstruction(
		&fmt, &insn, ops, insn.operand_count_visible, out, outlen, addr, NULL)))
		return -EINVAL;
	return 0;
}
