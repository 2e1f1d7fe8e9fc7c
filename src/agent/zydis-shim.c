/* The agent loads Zydis only once it counts, and only after the engines' sync point, so
 * that the dynamic loader's work for it (thousands of relocations) is never counted as the
 * program's.  These definitions stand in for Zydis's entry points that the arch code calls
 * and forward to the library loaded by tp_zydis_load(). */
#include <dlfcn.h>
#include <Zydis/Zydis.h>

#include "agent/agent-priv.h"

static struct {
	ZyanStatus (*decoder_init)(ZydisDecoder *, ZydisMachineMode, ZydisStackWidth);
	ZyanStatus (*decode_full)(const ZydisDecoder *, const void *, ZyanUSize,
				  ZydisDecodedInstruction *, ZydisDecodedOperand *);
	ZyanStatus (*calc_abs)(const ZydisDecodedInstruction *, const ZydisDecodedOperand *,
			       ZyanU64, ZyanU64 *);
	const char *(*mnemonic_string)(ZydisMnemonic);
	ZyanStatus (*formatter_init)(ZydisFormatter *, ZydisFormatterStyle);
	ZyanStatus (*format)(const ZydisFormatter *, const ZydisDecodedInstruction *,
			     const ZydisDecodedOperand *, ZyanU8, char *, ZyanUSize, ZyanU64,
			     void *);
	ZyanStatus (*encode_abs)(ZydisEncoderRequest *, void *, ZyanUSize *, ZyanU64);
	ZyanStatus (*nop_fill)(void *, ZyanUSize);
} zy;

int tp_zydis_load(void)
{
	static const char *const names[] = {"libZydis.so.4.0", "libZydis.so.4", "libZydis.so"};
	void *h = NULL;

	for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h)
		return -1;
	zy.decoder_init = dlsym(h, "ZydisDecoderInit");
	zy.decode_full = dlsym(h, "ZydisDecoderDecodeFull");
	zy.calc_abs = dlsym(h, "ZydisCalcAbsoluteAddress");
	zy.mnemonic_string = dlsym(h, "ZydisMnemonicGetString");
	zy.formatter_init = dlsym(h, "ZydisFormatterInit");
	zy.format = dlsym(h, "ZydisFormatterFormatInstruction");
	zy.encode_abs = dlsym(h, "ZydisEncoderEncodeInstructionAbsolute");
	zy.nop_fill = dlsym(h, "ZydisEncoderNopFill");
	if (!zy.encode_abs || !zy.nop_fill) /* the code writer's encoder */
		return -1;
	tp_agent_text_of(zy.decode_full, &tp_ag.zydis_start, &tp_ag.zydis_end);
	return zy.decoder_init && zy.decode_full && zy.calc_abs && zy.mnemonic_string ? 0 : -1;
}

#define NOT_LOADED ZYAN_STATUS_INVALID_OPERATION

ZyanStatus ZydisDecoderInit(ZydisDecoder *d, ZydisMachineMode m, ZydisStackWidth w)
{
	return zy.decoder_init ? zy.decoder_init(d, m, w) : NOT_LOADED;
}

ZyanStatus ZydisDecoderDecodeFull(const ZydisDecoder *d, const void *buf, ZyanUSize len,
				  ZydisDecodedInstruction *insn,
				  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT])
{
	return zy.decode_full ? zy.decode_full(d, buf, len, insn, ops) : NOT_LOADED;
}

ZyanStatus ZydisCalcAbsoluteAddress(const ZydisDecodedInstruction *insn,
				    const ZydisDecodedOperand *op, ZyanU64 addr, ZyanU64 *out)
{
	return zy.calc_abs ? zy.calc_abs(insn, op, addr, out) : NOT_LOADED;
}

const char *ZydisMnemonicGetString(ZydisMnemonic m)
{
	return zy.mnemonic_string ? zy.mnemonic_string(m) : NULL;
}

ZyanStatus ZydisFormatterInit(ZydisFormatter *f, ZydisFormatterStyle s)
{
	return zy.formatter_init ? zy.formatter_init(f, s) : NOT_LOADED;
}

ZyanStatus ZydisFormatterFormatInstruction(const ZydisFormatter *f,
					   const ZydisDecodedInstruction *insn,
					   const ZydisDecodedOperand *ops, ZyanU8 n, char *buf,
					   ZyanUSize len, ZyanU64 addr, void *user)
{
	return zy.format ? zy.format(f, insn, ops, n, buf, len, addr, user) : NOT_LOADED;
}

ZyanStatus ZydisEncoderEncodeInstructionAbsolute(ZydisEncoderRequest *req, void *buf,
						 ZyanUSize *len, ZyanU64 addr)
{
	return zy.encode_abs ? zy.encode_abs(req, buf, len, addr) : NOT_LOADED;
}

ZyanStatus ZydisEncoderNopFill(void *buf, ZyanUSize len)
{
	return zy.nop_fill ? zy.nop_fill(buf, len) : NOT_LOADED;
}
