/* x86-64 instruction relocation: copy one instruction to another address so that it still
 * does the same thing there (SSOL slots, jump pads, inline hooks, the code cache).  Only a
 * few fixed forms are emitted (jmp/jcc rel32, push of a return address); everything else is
 * the original bytes with, at most, their disp32 or rel32 field rewritten. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/decode-priv.h"

/* rel32 of a field ending at @end that must reach @target; -ERANGE beyond +-2 GiB. */
static int rel32(uint64_t end, uint64_t target, int32_t *rel)
{
	int64_t d = (int64_t)(target - end);

	if (d < INT32_MIN || d > INT32_MAX)
		return -ERANGE;
	*rel = (int32_t)d;
	return 0;
}

static void put32(uint8_t *p, int32_t v)
{
	memcpy(p, &v, 4); /* x86 is little-endian */
}

int tp_arch_emit_jmp(uint8_t out[5], uint64_t from, uint64_t to)
{
	int32_t rel;
	int err;

	if (!out)
		return -EINVAL;
	err = rel32(from + 5, to, &rel);
	if (err)
		return err;
	out[0] = 0xe9;
	put32(out + 1, rel);
	return 0;
}

/* Original bytes with the 4-byte field at @off re-aimed at @target from the copy at @to. */
static int copy_with_rel32(const uint8_t *src, const struct tp_insn *in, unsigned off,
			   uint64_t target, uint64_t to, uint8_t *out, size_t *outlen)
{
	int32_t rel;
	int err;

	/* A RIP-relative operand is relative to the end of the whole instruction, which may carry
	 * an immediate after the displacement ("mov dword [rip+x], imm32"). */
	err = rel32(to + in->len, target, &rel);
	if (err)
		return err;
	memcpy(out, src, in->len);
	put32(out + off, rel);
	*outlen = in->len;
	return 0;
}

/*
 * A relative call becomes "push return address; jmp target" so that the callee returns to
 * the original code and sees the return address the program expects (unwinders, stack
 * protectors and "call next; pop" idioms all read it).  Neither form touches registers or
 * flags.
 */
static int relocate_call(uint64_t ret, uint64_t target, uint64_t to, uint8_t *out, size_t outcap,
			 size_t *outlen)
{
	int64_t sret = (int64_t)ret;
	size_t n = 0;
	int32_t rel;
	int err;

	if (sret >= INT32_MIN && sret <= INT32_MAX) {
		/* push qword imm32: the immediate is sign-extended to 64 bits. */
		if (outcap < 10)
			return -ENOSPC;
		out[n++] = 0x68;
		put32(out + n, (int32_t)sret);
		n += 4;
	} else {
		/* lea rsp, [rsp-8] moves the stack without the flags side effect of sub. */
		static const uint8_t lea[] = {0x48, 0x8d, 0x64, 0x24, 0xf8};

		if (outcap < 25)
			return -ENOSPC;
		memcpy(out + n, lea, sizeof(lea));
		n += sizeof(lea);
		/* mov dword [rsp], lo32 */
		out[n++] = 0xc7;
		out[n++] = 0x04;
		out[n++] = 0x24;
		put32(out + n, (int32_t)(uint32_t)ret);
		n += 4;
		/* mov dword [rsp+4], hi32 */
		out[n++] = 0xc7;
		out[n++] = 0x44;
		out[n++] = 0x24;
		out[n++] = 0x04;
		put32(out + n, (int32_t)(uint32_t)(ret >> 32));
		n += 4;
	}
	err = rel32(to + n + 5, target, &rel);
	if (err)
		return err;
	out[n++] = 0xe9;
	put32(out + n, rel);
	n += 4;
	*outlen = n;
	return 0;
}

static int is_loop(unsigned mnemonic)
{
	return mnemonic == ZYDIS_MNEMONIC_LOOP || mnemonic == ZYDIS_MNEMONIC_LOOPE ||
	       mnemonic == ZYDIS_MNEMONIC_LOOPNE || mnemonic == ZYDIS_MNEMONIC_JRCXZ ||
	       mnemonic == ZYDIS_MNEMONIC_JECXZ;
}

static int relocate_branch(const uint8_t *src, const struct tp_insn *in, uint64_t from, uint64_t to,
			   uint8_t *out, size_t outcap, size_t *outlen)
{
	int32_t rel;
	int err;

	switch (in->kind) {
	case TP_INSN_JMP:
		/* Prefixes (bnd, branch hints, 66 which Intel ignores here) are dropped. */
		if (outcap < 5)
			return -ENOSPC;
		err = tp_arch_emit_jmp(out, to, in->target);
		if (err)
			return err;
		*outlen = 5;
		return 0;
	case TP_INSN_CALL:
		return relocate_call(from + in->len, in->target, to, out, outcap, outlen);
	case TP_INSN_JCC:
		if (in->mnemonic == ZYDIS_MNEMONIC_XBEGIN) {
			/* Its abort target is the only relative part: re-aim the rel32 in place.
			 * The rel16 form also truncates the fallback address: leave it alone. */
			if (in->imm_size != 4)
				return -ENOTSUP;
			if (outcap < in->len)
				return -ENOSPC;
			return copy_with_rel32(src, in, in->imm_offset, in->target, to, out,
					       outlen);
		}
		if (is_loop(in->mnemonic)) {
			/*
			 * loop/jrcxz only exist with rel8: keep the original (with its 67 prefix,
			 * if any) aimed two bytes ahead, hop over a jmp rel32 when not taken.
			 *     loop +2; jmp short +5; jmp rel32 target
			 */
			size_t n = in->len + 2 + 5;

			if (in->imm_size != 1)
				return -ENOTSUP;
			if (outcap < n)
				return -ENOSPC;
			err = rel32(to + n, in->target, &rel);
			if (err)
				return err;
			memcpy(out, src, in->len);
			out[in->imm_offset] = 2;
			out[in->len] = 0xeb;
			out[in->len + 1] = 0x05;
			out[in->len + 2] = 0xe9;
			put32(out + in->len + 3, rel);
			*outlen = n;
			return 0;
		}
		/* 7x rel8 and 0F 8x rel32 carry the condition in the low nibble of the opcode
		 * byte just before the displacement. */
		if (in->imm_offset < 1 || (in->imm_size != 1 && in->imm_size != 4))
			return -ENOTSUP;
		if (outcap < 6)
			return -ENOSPC;
		err = rel32(to + 6, in->target, &rel);
		if (err)
			return err;
		out[0] = 0x0f;
		out[1] = 0x80 | (src[in->imm_offset - 1] & 0x0f);
		put32(out + 2, rel);
		*outlen = 6;
		return 0;
	default:
		return -ENOTSUP;
	}
}

int tp_arch_relocate(const void *buf, size_t len, uint64_t from, uint64_t to, uint8_t *out,
		     size_t outcap, size_t *outlen)
{
	ZydisDecodedInstruction zi;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	struct tp_insn in;
	int err;

	if (!buf || !out || !outlen)
		return -EINVAL;
	*outlen = 0;
	err = tp_arch_decode_zydis(buf, len, &zi, ops);
	if (err)
		return err;
	err = tp_arch_insn_from_zydis(&zi, ops, from, &in);
	if (err)
		return err;

	if (in.flags & TP_INSN_F_RELBR)
		return relocate_branch(buf, &in, from, to, out, outcap, outlen);

	if (in.flags & TP_INSN_F_RIPREL) {
		/* [eip+disp32] (67 prefix) wraps at 4 GiB: nobody emits it, so do not guess. */
		for (unsigned i = 0; i < zi.operand_count; i++)
			if (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY &&
			    ops[i].mem.base == ZYDIS_REGISTER_EIP)
				return -ENOTSUP;
		if (zi.raw.disp.size != 32)
			return -ENOTSUP;
		if (outcap < in.len)
			return -ENOSPC;
		return copy_with_rel32(buf, &in, in.disp_offset, in.target, to, out, outlen);
	}

	/* Nothing else in 64-bit mode depends on where it runs: ret, indirect branches through
	 * registers, syscall and traps are copied as they are. */
	if (outcap < in.len)
		return -ENOSPC;
	memcpy(out, buf, in.len);
	*outlen = in.len;
	return 0;
}
