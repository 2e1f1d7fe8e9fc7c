/* x86-64 instruction relocation: copy instructions to another address so that they still do
 * the same thing there (SSOL slots, jump pads, inline hooks, the code cache).  The forms that
 * change (jmp/jcc rel32, push of a return address) are written by the code writer; everything
 * else is the original bytes with, at most, their disp32 or rel32 field re-aimed. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/decode-priv.h"
#include "arch/x86_64/writer-priv.h"

static void fail(struct tp_arch_writer *w, int err)
{
	if (!w->err)
		w->err = err;
}

/* Original bytes with the 4-byte field at @off re-aimed at @target from the copy. */
static void copy_with_rel32(struct tp_arch_writer *w, const uint8_t *src, const struct tp_insn *in,
			    unsigned off, uint64_t target)
{
	/* A RIP-relative operand is relative to the end of the whole instruction, which may carry
	 * an immediate after the displacement ("mov dword [rip+x], imm32"). */
	int64_t d = (int64_t)(target - (tp_arch_writer_pc(w) + in->len));
	size_t at = w->len;
	int32_t rel = (int32_t)d;

	if (d < INT32_MIN || d > INT32_MAX)
		return fail(w, -ERANGE);
	tp_arch_put_data(w, src, in->len);
	if (!w->err)
		memcpy(w->buf + at + off, &rel, 4); /* x86 is little-endian */
}

static int is_loop(unsigned mnemonic)
{
	return mnemonic == ZYDIS_MNEMONIC_LOOP || mnemonic == ZYDIS_MNEMONIC_LOOPE ||
	       mnemonic == ZYDIS_MNEMONIC_LOOPNE || mnemonic == ZYDIS_MNEMONIC_JRCXZ ||
	       mnemonic == ZYDIS_MNEMONIC_JECXZ;
}

static void relocate_branch(struct tp_arch_writer *w, const uint8_t *src, const struct tp_insn *in,
			    uint64_t from)
{
	int cc, skip;

	switch (in->kind) {
	case TP_INSN_JMP:
		/* Prefixes (bnd, branch hints, 66 which Intel ignores here) are dropped. */
		return tp_arch_put_jmp(w, in->target, TP_ARCH_BR_32);
	case TP_INSN_CALL:
		/*
		 * push return address; jmp target: the callee returns to the original code
		 * and sees the return address the program expects (unwinders, stack protectors
		 * and "call next; pop" idioms all read it).  Neither touches registers or flags.
		 */
		tp_arch_put_push_u64(w, from + in->len);
		return tp_arch_put_jmp(w, in->target, TP_ARCH_BR_32);
	case TP_INSN_JCC:
		if (in->mnemonic == ZYDIS_MNEMONIC_XBEGIN) {
			/* Its abort target is the only relative part: re-aim the rel32 in place.
			 * The rel16 form also truncates the fallback address: leave it alone. */
			if (in->imm_size != 4)
				return fail(w, -ENOTSUP);
			return copy_with_rel32(w, src, in, in->imm_offset, in->target);
		}
		if (is_loop(in->mnemonic)) {
			/*
			 * loop/jrcxz only exist with rel8: keep the original (with its 67 prefix,
			 * if any) aimed two bytes ahead, hop over a jmp rel32 when not taken.
			 *     loop +2; jmp short +5; jmp rel32 target
			 */
			size_t at = w->len;

			if (in->imm_size != 1 || in->imm_offset != in->len - 1)
				return fail(w, -ENOTSUP);
			skip = tp_arch_label_new(w);
			tp_arch_put_data(w, src, in->len);
			if (w->err)
				return;
			w->buf[at + in->imm_offset] = 2;
			tp_arch_put_jmp_label(w, skip, TP_ARCH_BR_8);
			tp_arch_put_jmp(w, in->target, TP_ARCH_BR_32);
			return tp_arch_label_bind(w, skip);
		}
		cc = tp_arch_jcc_cc((ZydisMnemonic)in->mnemonic);
		if (cc < 0)
			return fail(w, -ENOTSUP);
		return tp_arch_put_jcc(w, (enum tp_arch_cc)cc, in->target, TP_ARCH_BR_32);
	default:
		return fail(w, -ENOTSUP);
	}
}

/* Decode one instruction at @from and write its relocated form at the writer's position. */
static int relocate_one(struct tp_arch_writer *w, const uint8_t *buf, size_t len, uint64_t from,
			struct tp_insn *in)
{
	ZydisDecodedInstruction zi;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	int err;

	err = tp_arch_decode_zydis(buf, len, &zi, ops);
	if (!err)
		err = tp_arch_insn_from_zydis(&zi, ops, from, in);
	if (err)
		return fail(w, err), err;

	if (in->flags & TP_INSN_F_RELBR) {
		relocate_branch(w, buf, in, from);
	} else if (in->flags & TP_INSN_F_RIPREL) {
		/* [eip+disp32] (67 prefix) wraps at 4 GiB: nobody emits it, so do not guess. */
		for (unsigned i = 0; i < zi.operand_count; i++)
			if (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY &&
			    ops[i].mem.base == ZYDIS_REGISTER_EIP)
				return fail(w, -ENOTSUP), -ENOTSUP;
		if (zi.raw.disp.size != 32)
			return fail(w, -ENOTSUP), -ENOTSUP;
		copy_with_rel32(w, buf, in, in->disp_offset, in->target);
	} else {
		/* Nothing else in 64-bit mode depends on where it runs: ret, indirect branches
		 * through registers, syscall and traps are copied as they are. */
		tp_arch_put_data(w, buf, in->len);
	}
	return w->err;
}

int tp_arch_relocate(const void *buf, size_t len, uint64_t from, uint64_t to, uint8_t *out,
		     size_t outcap, size_t *outlen)
{
	struct tp_arch_writer w;
	struct tp_insn in;
	int err;

	if (!buf || !out || !outlen)
		return -EINVAL;
	*outlen = 0;
	tp_arch_writer_init(&w, out, outcap, to);
	err = relocate_one(&w, buf, len, from, &in);
	if (!err)
		err = tp_arch_writer_finish(&w, outlen);
	return err;
}

/*
 * Does any relative branch of the function land strictly inside [lo, hi)?  A linear sweep:
 * bytes that do not decode (data, padding) are stepped over one at a time.  Branches through
 * registers or tables cannot be seen here; that is the caller's risk to take.
 */
static int branch_into(const struct tp_arch_fn *fn, uint64_t lo, uint64_t hi, uint64_t *where)
{
	const uint8_t *p = fn->code;
	struct tp_insn in;

	for (size_t off = 0; off < fn->len;) {
		if (tp_arch_decode(p + off, fn->len - off, fn->addr + off, &in)) {
			off++;
			continue;
		}
		if ((in.flags & TP_INSN_F_RELBR) && in.target > lo && in.target < hi) {
			*where = fn->addr + off;
			return 1;
		}
		off += in.len;
	}
	return 0;
}

static int refuse(struct tp_arch_reloc *res, enum tp_arch_reloc_why why, uint64_t where, int err)
{
	res->why = why;
	res->where = where;
	return err;
}

int tp_arch_relocate_n(struct tp_arch_writer *w, const void *code, size_t code_len, uint64_t from,
		       size_t n, const struct tp_arch_fn *fn, struct tp_arch_reloc *res)
{
	const uint8_t *p = code;
	struct tp_insn in = {0};
	size_t off = 0;
	int err;

	if (!w || !code || !n || !res)
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	if (w->err)
		return w->err;
	/* Decode first: the range's end is needed before anything is written. */
	while (off < n) {
		if (tp_arch_decode(p + off, code_len - off, from + off, &in))
			return refuse(res, TP_RELOC_DECODE, from + off, -EINVAL);
		off += in.len;
	}
	if (fn && fn->code) {
		uint64_t where;

		if (from < fn->addr || from + off > fn->addr + fn->len)
			return refuse(res, TP_RELOC_FUNC_END, from, -ENOTSUP);
		if (branch_into(fn, from, from + off, &where))
			return refuse(res, TP_RELOC_BRANCH_INTO, where, -EBUSY);
	} else {
		/* Without the function, at least the range must not branch into itself. */
		struct tp_arch_fn self = {.code = code, .len = off, .addr = from};
		uint64_t where;

		if (branch_into(&self, from, from + off, &where))
			return refuse(res, TP_RELOC_BRANCH_INTO, where, -EBUSY);
	}

	for (size_t at = 0; at < off; at += in.len) {
		err = relocate_one(w, p + at, code_len - at, from + at, &in);
		if (err == -ERANGE)
			return refuse(res, TP_RELOC_REACH, from + at, err);
		if (err == -ENOSPC)
			return refuse(res, TP_RELOC_SPACE, from + at, err);
		if (err)
			return refuse(res, TP_RELOC_UNMOVABLE, from + at, err);
		res->ninsn++;
	}
	res->covered = off;
	res->falls_through = in.kind != TP_INSN_RET && in.kind != TP_INSN_JMP;
	return 0;
}
