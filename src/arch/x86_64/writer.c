/* The x86-64 code writer: every instruction tracepad generates goes through Zydis's encoder
 * here; labels let stubs branch forward and backward, their rel8/rel32 fields are filled in
 * by tp_arch_writer_finish().  Runs in traced programs: no allocation, no locks. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/writer-priv.h"

/* Lengths of the branch forms, to know where a rel field ends before encoding it. */
#define JMP8_LEN 2
#define JCC8_LEN 2
#define JCC32_LEN 6

static const ZydisMnemonic jcc_mnemonics[16] = {
    ZYDIS_MNEMONIC_JO, ZYDIS_MNEMONIC_JNO, ZYDIS_MNEMONIC_JB,  ZYDIS_MNEMONIC_JNB,
    ZYDIS_MNEMONIC_JZ, ZYDIS_MNEMONIC_JNZ, ZYDIS_MNEMONIC_JBE, ZYDIS_MNEMONIC_JNBE,
    ZYDIS_MNEMONIC_JS, ZYDIS_MNEMONIC_JNS, ZYDIS_MNEMONIC_JP,  ZYDIS_MNEMONIC_JNP,
    ZYDIS_MNEMONIC_JL, ZYDIS_MNEMONIC_JNL, ZYDIS_MNEMONIC_JLE, ZYDIS_MNEMONIC_JNLE,
};

ZydisMnemonic tp_arch_jcc_mnemonic(enum tp_arch_cc cc)
{
	return jcc_mnemonics[cc & 15];
}

int tp_arch_jcc_cc(ZydisMnemonic m)
{
	for (int i = 0; i < 16; i++)
		if (jcc_mnemonics[i] == m)
			return i;
	return -1;
}

static ZydisRegister gpr64(enum tp_arch_reg r)
{
	return (ZydisRegister)(ZYDIS_REGISTER_RAX + (r & 15));
}

static void fail(struct tp_arch_writer *w, int err)
{
	if (!w->err)
		w->err = err;
}

void tp_arch_writer_init(struct tp_arch_writer *w, void *buf, size_t cap, uint64_t pc)
{
	w->buf = buf;
	w->cap = buf ? cap : 0;
	w->len = 0;
	w->pc = pc;
	w->err = buf ? 0 : -EINVAL;
	w->nlabels = 0;
	w->nfixups = 0;
}

void tp_arch_put_op(struct tp_arch_writer *w, ZydisMnemonic m, ZydisBranchWidth width,
		    unsigned nops, const ZydisEncoderOperand *ops)
{
	ZydisEncoderRequest req;
	ZyanUSize n;
	ZyanStatus st;

	if (w->err)
		return;
	if (nops > ZYDIS_ENCODER_MAX_OPERANDS)
		return fail(w, -EINVAL);
	memset(&req, 0, sizeof(req));
	req.machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
	req.mnemonic = m;
	req.branch_width = width;
	req.operand_count = (ZyanU8)nops;
	if (nops)
		memcpy(req.operands, ops, nops * sizeof(*ops));
	n = w->cap - w->len;
	st = ZydisEncoderEncodeInstructionAbsolute(&req, w->buf + w->len, &n, tp_arch_writer_pc(w));
	if (ZYAN_FAILED(st))
		return fail(w, st == ZYAN_STATUS_INSUFFICIENT_BUFFER_SIZE ? -ENOSPC : -EINVAL);
	w->len += n;
}

void tp_arch_put_data(struct tp_arch_writer *w, const void *data, size_t n)
{
	if (w->err)
		return;
	if (n > w->cap - w->len)
		return fail(w, -ENOSPC);
	memcpy(w->buf + w->len, data, n);
	w->len += n;
}

void tp_arch_put_nop(struct tp_arch_writer *w, size_t n)
{
	if (w->err)
		return;
	if (n > w->cap - w->len)
		return fail(w, -ENOSPC);
	if (ZYAN_FAILED(ZydisEncoderNopFill(w->buf + w->len, n)))
		return fail(w, -EINVAL);
	w->len += n;
}

int tp_arch_label_new(struct tp_arch_writer *w)
{
	if (w->err)
		return -1;
	if (w->nlabels >= TP_ARCH_WRITER_LABELS)
		return fail(w, -E2BIG), -1;
	w->label_at[w->nlabels] = UINT32_MAX;
	return (int)w->nlabels++;
}

void tp_arch_label_bind(struct tp_arch_writer *w, int label)
{
	if (w->err)
		return;
	if (label < 0 || (unsigned)label >= w->nlabels || w->label_at[label] != UINT32_MAX)
		return fail(w, -EINVAL);
	w->label_at[label] = (uint32_t)w->len;
}

static int fits8(int64_t d)
{
	return d >= INT8_MIN && d <= INT8_MAX;
}

static int fits32(int64_t d)
{
	return d >= INT32_MIN && d <= INT32_MAX;
}

/*
 * A relative branch to an absolute @target: the width is decided here (not by Zydis) so that
 * "out of reach" is -ERANGE and AUTO means what the header says.  @len8/@len32 are the
 * lengths of the two forms; @len8 == 0 when there is no rel8 form (call).
 */
static void put_branch(struct tp_arch_writer *w, ZydisMnemonic m, uint64_t target,
		       enum tp_arch_br width, unsigned len8, unsigned len32)
{
	uint64_t at = tp_arch_writer_pc(w);
	int64_t d8 = (int64_t)(target - (at + len8));
	int64_t d32 = (int64_t)(target - (at + len32));
	ZydisBranchWidth zw;

	if (width == TP_ARCH_BR_8 && (!len8 || !fits8(d8)))
		return fail(w, -ERANGE);
	if (width == TP_ARCH_BR_AUTO && len8 && fits8(d8))
		width = TP_ARCH_BR_8;
	if (width != TP_ARCH_BR_8 && !fits32(d32))
		return fail(w, -ERANGE);
	zw = width == TP_ARCH_BR_8 ? ZYDIS_BRANCH_WIDTH_8 : ZYDIS_BRANCH_WIDTH_32;
	tp_arch_put_op(w, m, zw, 1, &TP_OP_IMM(target));
}

/* A branch to a label: bound labels are known targets; others get a fixup. */
static void put_branch_label(struct tp_arch_writer *w, ZydisMnemonic m, int label,
			     enum tp_arch_br width, unsigned len8, unsigned len32)
{
	struct tp_arch_fixup *f;
	size_t before;

	if (w->err)
		return;
	if (label < 0 || (unsigned)label >= w->nlabels)
		return fail(w, -EINVAL);
	if (w->label_at[label] != UINT32_MAX)
		return put_branch(w, m, w->pc + w->label_at[label], width, len8, len32);
	if (w->nfixups >= TP_ARCH_WRITER_FIXUPS)
		return fail(w, -E2BIG);
	if (width == TP_ARCH_BR_8 && !len8)
		return fail(w, -EINVAL);
	/* Aimed at itself for now (in reach of either width); finish() re-aims it. */
	before = w->len;
	put_branch(w, m, tp_arch_writer_pc(w), width == TP_ARCH_BR_8 ? width : TP_ARCH_BR_32, len8,
		   len32);
	if (w->err)
		return;
	f = &w->fixups[w->nfixups++];
	f->end = (uint32_t)w->len;
	f->size = w->len - before == len8 && width == TP_ARCH_BR_8 ? 1 : 4;
	f->label = (uint8_t)label;
}

int tp_arch_writer_finish(struct tp_arch_writer *w, size_t *len)
{
	for (unsigned i = 0; !w->err && i < w->nfixups; i++) {
		const struct tp_arch_fixup *f = &w->fixups[i];
		int64_t d;

		if (w->label_at[f->label] == UINT32_MAX)
			return w->err = -EINVAL;
		d = (int64_t)w->label_at[f->label] - (int64_t)f->end;
		if (f->size == 1) {
			if (!fits8(d))
				return w->err = -ERANGE;
			w->buf[f->end - 1] = (uint8_t)(int8_t)d;
		} else {
			int32_t v = (int32_t)d; /* within the buffer: always fits */

			memcpy(w->buf + f->end - 4, &v, 4); /* x86 is little-endian */
		}
	}
	if (!w->err)
		w->nfixups = 0;
	if (len)
		*len = w->err ? 0 : w->len;
	return w->err;
}

void tp_arch_put_jmp(struct tp_arch_writer *w, uint64_t target, enum tp_arch_br width)
{
	put_branch(w, ZYDIS_MNEMONIC_JMP, target, width, JMP8_LEN, TP_ARCH_JMP32_LEN);
}

void tp_arch_put_jmp_label(struct tp_arch_writer *w, int label, enum tp_arch_br width)
{
	put_branch_label(w, ZYDIS_MNEMONIC_JMP, label, width, JMP8_LEN, TP_ARCH_JMP32_LEN);
}

void tp_arch_put_jmp_far(struct tp_arch_writer *w, uint64_t target)
{
	/* The 8-byte slot sits right after the 6-byte jmp: [rip+0]. */
	TP_PUT(w, ZYDIS_MNEMONIC_JMP, TP_OP_RIPMEM(tp_arch_writer_pc(w) + 6, 8));
	tp_arch_put_data(w, &target, sizeof(target));
}

void tp_arch_put_jcc(struct tp_arch_writer *w, enum tp_arch_cc cc, uint64_t target,
		     enum tp_arch_br width)
{
	put_branch(w, tp_arch_jcc_mnemonic(cc), target, width, JCC8_LEN, JCC32_LEN);
}

void tp_arch_put_jcc_label(struct tp_arch_writer *w, enum tp_arch_cc cc, int label,
			   enum tp_arch_br width)
{
	put_branch_label(w, tp_arch_jcc_mnemonic(cc), label, width, JCC8_LEN, JCC32_LEN);
}

void tp_arch_put_call(struct tp_arch_writer *w, uint64_t target)
{
	put_branch(w, ZYDIS_MNEMONIC_CALL, target, TP_ARCH_BR_32, 0, TP_ARCH_CALL32_LEN);
}

void tp_arch_put_call_label(struct tp_arch_writer *w, int label)
{
	put_branch_label(w, ZYDIS_MNEMONIC_CALL, label, TP_ARCH_BR_32, 0, TP_ARCH_CALL32_LEN);
}

void tp_arch_put_call_reg(struct tp_arch_writer *w, enum tp_arch_reg r)
{
	TP_PUT(w, ZYDIS_MNEMONIC_CALL, TP_OP_REG(gpr64(r)));
}

void tp_arch_put_ret(struct tp_arch_writer *w)
{
	TP_PUT0(w, ZYDIS_MNEMONIC_RET);
}

void tp_arch_put_int3(struct tp_arch_writer *w)
{
	TP_PUT0(w, ZYDIS_MNEMONIC_INT3);
}

void tp_arch_put_syscall(struct tp_arch_writer *w)
{
	TP_PUT0(w, ZYDIS_MNEMONIC_SYSCALL);
}

void tp_arch_put_push_reg(struct tp_arch_writer *w, enum tp_arch_reg r)
{
	TP_PUT(w, ZYDIS_MNEMONIC_PUSH, TP_OP_REG(gpr64(r)));
}

void tp_arch_put_pop_reg(struct tp_arch_writer *w, enum tp_arch_reg r)
{
	TP_PUT(w, ZYDIS_MNEMONIC_POP, TP_OP_REG(gpr64(r)));
}

void tp_arch_put_lea_rsp(struct tp_arch_writer *w, int32_t delta)
{
	TP_PUT(w, ZYDIS_MNEMONIC_LEA, TP_OP_REG(ZYDIS_REGISTER_RSP),
	       TP_OP_MEM(ZYDIS_REGISTER_RSP, delta, 8));
}

void tp_arch_put_push_u64(struct tp_arch_writer *w, uint64_t v)
{
	int64_t s = (int64_t)v;

	if (fits32(s)) {
		/* push imm32: sign-extended to 64 bits. */
		tp_arch_put_op(w, ZYDIS_MNEMONIC_PUSH, ZYDIS_BRANCH_WIDTH_NONE, 1, &TP_OP_IMM(v));
		return;
	}
	/* lea, not sub: no flags change.  Zydis takes a 32-bit immediate as its sign
	 * extension. */
	tp_arch_put_lea_rsp(w, -8);
	TP_PUT(w, ZYDIS_MNEMONIC_MOV, TP_OP_MEM(ZYDIS_REGISTER_RSP, 0, 4),
	       TP_OP_IMM((uint64_t)(int64_t)(int32_t)(uint32_t)v));
	TP_PUT(w, ZYDIS_MNEMONIC_MOV, TP_OP_MEM(ZYDIS_REGISTER_RSP, 4, 4),
	       TP_OP_IMM((uint64_t)(int64_t)(int32_t)(uint32_t)(v >> 32)));
}

void tp_arch_put_mov_reg_u64(struct tp_arch_writer *w, enum tp_arch_reg r, uint64_t v)
{
	TP_PUT(w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(gpr64(r)), TP_OP_IMM(v));
}

/* The one-instruction encoders below keep the signatures their callers had. */
static int emit_one(uint8_t *out, size_t cap, uint64_t at,
		    void (*put)(struct tp_arch_writer *, uint64_t), uint64_t arg)
{
	struct tp_arch_writer w;

	if (!out)
		return -EINVAL;
	tp_arch_writer_init(&w, out, cap, at);
	put(&w, arg);
	return tp_arch_writer_finish(&w, NULL);
}

static void put_jmp32(struct tp_arch_writer *w, uint64_t to)
{
	tp_arch_put_jmp(w, to, TP_ARCH_BR_32);
}

static void put_syscall(struct tp_arch_writer *w, uint64_t unused)
{
	(void)unused;
	tp_arch_put_syscall(w);
}

int tp_arch_emit_jmp(uint8_t out[5], uint64_t from, uint64_t to)
{
	return emit_one(out, TP_ARCH_JMP32_LEN, from, put_jmp32, to);
}

int tp_arch_emit_call(uint8_t out[5], uint64_t from, uint64_t to)
{
	return emit_one(out, TP_ARCH_CALL32_LEN, from, tp_arch_put_call, to);
}

int tp_arch_emit_syscall(uint8_t out[2])
{
	return emit_one(out, TP_ARCH_SYSCALL_LEN, 0, put_syscall, 0);
}

int tp_arch_emit_call_int3(uint8_t *out, size_t cap, uint64_t at, uint64_t fn, size_t *len)
{
	struct tp_arch_writer w;

	tp_arch_writer_init(&w, out, cap, at);
	tp_arch_put_call(&w, fn);
	tp_arch_put_int3(&w);
	return tp_arch_writer_finish(&w, len);
}
