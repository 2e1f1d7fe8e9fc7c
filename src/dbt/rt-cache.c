/* The code cache: program blocks translated into chunks of memory near their code, with
 * the clients' code (rt-client.h: the count at each block's entry); direct exits go through
 * the dispatcher once and are then linked, indirect ones through the lookup table
 * (rt-entry.S's ibl). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <asm/prctl.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/decode-priv.h"
#include "base/procfs.h"
#include "dbt/rt-client.h"
#include "dbt/rt-priv.h"
#include "rt/raw.h"
#include "rt/rt.h"

#define BLOCK_MAX_INSNS 64
#define BLOCK_ROOM 8192	  /* more than any block and its exits take */
#define TABLE_BITS 18	  /* at most */
#define TABLE_MIN_BITS 12 /* at first: each page it spans is a fault when first touched */
#define PAGE_BITS 16	  /* the set of code pages translated from, at most */
#define PAGE_MIN_BITS 9	  /* at first (a page of memory: a short run translates from few) */

struct entry {
	uint64_t pc, cache;
};

static struct {
	struct entry *table; /* every translated block: pc -> cache, open addressing */
	unsigned bits;	     /* of the table's size, doubled when half full */
	uint64_t nblocks;
	uint64_t *pages;    /* page numbers + 1 of translated code, open addressing */
	unsigned page_bits; /* of its size, doubled when half full */
	uint64_t npages, last_end;
	int pages_full;
	uint8_t buf[BLOCK_ROOM];
	/* the block's exit stubs (offsets in buf) and their targets, linked at once to the
	 * targets already translated */
	uint32_t stub_at[8];
	uint64_t stub_to[8];
	int nstubs;
} C;

extern const uint8_t tp_dbt_tpl_stub[], tp_dbt_tpl_stub_end[];
extern const uint8_t tp_dbt_tpl_gate[], tp_dbt_tpl_gate_reason[], tp_dbt_tpl_gate_end[];
extern const uint8_t tp_dbt_tpl_save_rax[], tp_dbt_tpl_save_rax_end[];
extern const uint8_t tp_dbt_tpl_to_ibl[], tp_dbt_tpl_to_ibl_end[];
extern const uint8_t tp_dbt_tpl_sysret[], tp_dbt_tpl_sysret_end[];

#define TPL(w, name)                                                                               \
	tp_arch_put_data(w, tp_dbt_tpl_##name, tp_dbt_tpl_##name##_end - tp_dbt_tpl_##name)

/* Fibonacci hashing: block addresses are dense, and their low bits alone make long runs
 * in an open-addressed table. */
static uint64_t hash(uint64_t pc, unsigned bits)
{
	return (pc * 0x9e3779b97f4a7c15ull) >> (64 - bits);
}

int tp_dbt_cache_init(void)
{
	C.bits = TABLE_MIN_BITS;
	C.table = tp_dbt_alloc(sizeof(struct entry) << C.bits);
	C.page_bits = PAGE_MIN_BITS;
	C.pages = tp_dbt_alloc(sizeof(uint64_t) << C.page_bits);
	if (!C.table || !C.pages)
		return -ENOMEM;
	tp_dbt_chunk_init(tp_dbt.boot->cache_size, BLOCK_ROOM);
	return 0;
}

static int cache_write(uint64_t at, const void *src, size_t len)
{
	return tp_dbt_cache_write(at, src, len);
}

void tp_dbt_blocks_forget(void)
{
	memset(C.table, 0, sizeof(struct entry) << C.bits);
	C.nblocks = 0;
}

/* ---- translation ---- */

/* Copy up to 15 bytes of code at @pc without reading past a mapping's end: near a page's
 * end, only the page's bytes unless @cross (most instructions there end on the page; the
 * read across is a system call, once per decode that needs it). */
static size_t fetch(uint64_t pc, uint8_t *out, int cross)
{
	uint64_t page_left = 4096 - (pc & 4095);
	struct {
		void *base;
		size_t len;
	} local = {out, TP_ARCH_MAX_INSN_LEN},
	  remote = {(void *)(uintptr_t)pc, TP_ARCH_MAX_INSN_LEN};
	long n;

	if (page_left >= TP_ARCH_MAX_INSN_LEN) {
		memcpy(out, (const void *)(uintptr_t)pc, TP_ARCH_MAX_INSN_LEN);
		tp_dbt_map_unbreak(pc, out, TP_ARCH_MAX_INSN_LEN);
		return TP_ARCH_MAX_INSN_LEN;
	}
	if (!cross) {
		memcpy(out, (const void *)(uintptr_t)pc, page_left);
		tp_dbt_map_unbreak(pc, out, page_left);
		return page_left;
	}
	/* this process's memory: a forked child's tp_dbt.pid is its parent, perhaps gone */
	n = tp_raw6(SYS_process_vm_readv, tp_raw0(SYS_getpid), (long)&local, 1, (long)&remote, 1,
		    0);
	if (n <= 0) {
		memcpy(out, (const void *)(uintptr_t)pc, page_left);
		n = (long)page_left;
	}
	tp_dbt_map_unbreak(pc, out, (size_t)n);
	return (size_t)n;
}

/* One instruction decoded, with what both the translation and the count's flags test
 * read.  The first instructions of a block are decoded by the flags test and kept for the
 * translation that follows (decoding is a fifth of the start-up's cost). */
struct dec {
	uint64_t pc;
	size_t have; /* bytes fetched */
	uint8_t b[TP_ARCH_MAX_INSN_LEN];
	struct tp_insn in;
	const ZydisAccessedFlags *cpu_flags;
	ZydisInstructionCategory category;
	ZydisInstructionAttributes attributes;
};
#define DEC_AHEAD 8
static struct {
	struct dec d[DEC_AHEAD]; /* the block's first instructions, in order */
	int n;
} D;

/* Decode the instruction at @pc into @d; 0, or -EINVAL for bytes the decoder does not
 * know. */
static ZydisDecoder dec;

static int decode(uint64_t pc, struct dec *d)
{
	static int ready;
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	ZydisDecodedInstruction zi;
	ZydisDecoderContext ctx;

	if (!ready &&
	    ZYAN_FAILED(ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64)))
		return -EINVAL;
	ready = 1;
	d->pc = pc;
	d->have = fetch(pc, d->b, 0);
	if (ZYAN_FAILED(ZydisDecoderDecodeInstruction(&dec, &ctx, d->b, d->have, &zi)) &&
	    (d->have == TP_ARCH_MAX_INSN_LEN ||
	     ZYAN_FAILED(ZydisDecoderDecodeInstruction(&dec, &ctx, d->b,
						       d->have = fetch(pc, d->b, 1), &zi))))
		return -EINVAL;
	/* the operands (a third of decoding) only where tp_arch_insn_from_zydis reads them:
	 * a RIP-relative operand (modrm 00 101, its only encoding), a relative branch, int n */
	if ((zi.attributes & ZYDIS_ATTRIB_IS_RELATIVE) || zi.mnemonic == ZYDIS_MNEMONIC_INT ||
	    ((zi.attributes & ZYDIS_ATTRIB_HAS_MODRM) && zi.raw.modrm.mod == 0 &&
	     zi.raw.modrm.rm == 5)) {
		if (ZYAN_FAILED(ZydisDecoderDecodeOperands(&dec, &ctx, &zi, ops, zi.operand_count)))
			return -EINVAL;
	} else {
		zi.operand_count = zi.operand_count_visible = 0;
	}
	d->cpu_flags = zi.cpu_flags;
	d->category = zi.meta.category;
	d->attributes = zi.attributes;
	return tp_arch_insn_from_zydis(&zi, ops, pc, &d->in);
}

/* The @i-th instruction of the block being translated, at @pc: kept, or decoded now. */
static const struct dec *decode_nth(int i, uint64_t pc, struct dec *spare)
{
	if (i < D.n && D.d[i].pc == pc)
		return &D.d[i];
	return decode(pc, spare) ? NULL : spare;
}

/* Where are the status flags dead in the block at @pc: the first of its instructions
 * from which on every status flag is written before any is read (the index, -1 for none
 * among the first DEC_AHEAD)?  Writes that may not happen are not writes: a shift or
 * rotate by 0, a rep string instruction with rcx = 0.  A flag an instruction leaves
 * "undefined" (AF after test, and, or, xor) is written: the architecture lets it hold any
 * value after it, the count's as well (python3's blocks "test; jcc" counted with lea
 * through rax were a fifth of its interpreter loop's time).  Called as the block at @pc is
 * begun: what is decoded here is kept for its translation. */
int tp_dbt_flags_dead_from(uint64_t pc)
{
	const uint32_t status = ZYDIS_CPUFLAG_CF | ZYDIS_CPUFLAG_PF | ZYDIS_CPUFLAG_AF |
				ZYDIS_CPUFLAG_ZF | ZYDIS_CPUFLAG_SF | ZYDIS_CPUFLAG_OF;
	uint32_t need[DEC_AHEAD]; /* of each start so far, the flags not written yet; 0: failed */

	D.n = 0;
	if (tp_dbt.boot->flags & TP_DBT_BOOT_EXACT_FLAGS)
		return -1; /* a debugger's breakpoint may stop at any instruction */
	for (int i = 0; i < DEC_AHEAD; i++) {
		struct dec *d = &D.d[i];
		const ZydisAccessedFlags *f;
		uint32_t wr = 0;

		if (decode(pc, d))
			return -1;
		D.n = i + 1;
		/* what ends a block (a branch, a system call, a trap) ends the search */
		if (!d->cpu_flags || d->in.kind != TP_INSN_OTHER ||
		    d->category == ZYDIS_CATEGORY_COND_BR ||
		    d->category == ZYDIS_CATEGORY_UNCOND_BR || d->category == ZYDIS_CATEGORY_CALL ||
		    d->category == ZYDIS_CATEGORY_RET || d->category == ZYDIS_CATEGORY_SYSCALL ||
		    d->category == ZYDIS_CATEGORY_INTERRUPT)
			return -1;
		f = d->cpu_flags;
		need[i] = status;
		if (d->category != ZYDIS_CATEGORY_SHIFT && d->category != ZYDIS_CATEGORY_ROTATE &&
		    !(d->attributes &
		      (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)))
			wr = f->modified | f->set_0 | f->set_1 | f->undefined;
		for (int p = 0; p <= i; p++) {
			if (!need[p])
				continue;
			if (f->tested & need[p]) {
				need[p] = 0;
				continue;
			}
			need[p] &= ~wr;
			if (!need[p])
				return p;
		}
		pc += d->in.len;
	}
	return -1;
}

/* The number (0 rax ... 15 r15) of the general register that @r is or is part of; -1. */
static int gpr(ZydisRegister r, int *width)
{
	if (r >= ZYDIS_REGISTER_RAX && r <= ZYDIS_REGISTER_R15) {
		*width = 64;
		return (int)(r - ZYDIS_REGISTER_RAX);
	}
	if (r >= ZYDIS_REGISTER_EAX && r <= ZYDIS_REGISTER_R15D) {
		*width = 32;
		return (int)(r - ZYDIS_REGISTER_EAX);
	}
	if (r >= ZYDIS_REGISTER_AX && r <= ZYDIS_REGISTER_R15W) {
		*width = 16;
		return (int)(r - ZYDIS_REGISTER_AX);
	}
	*width = 8;
	if (r >= ZYDIS_REGISTER_AL && r <= ZYDIS_REGISTER_BL)
		return (int)(r - ZYDIS_REGISTER_AL);
	if (r >= ZYDIS_REGISTER_AH && r <= ZYDIS_REGISTER_BH)
		return (int)(r - ZYDIS_REGISTER_AH);
	if (r >= ZYDIS_REGISTER_SPL && r <= ZYDIS_REGISTER_R15B)
		return (int)(r - ZYDIS_REGISTER_SPL) + 4;
	return -1;
}

/* A general register whose value is dead at the entry of the block just begun (after
 * tp_dbt_flags_dead_from): its first instruction is a mov of a register or an immediate,
 * or a lea, that writes all of it (64 or 32 bits) without reading it, and cannot fault, so
 * that no handler sees the register before the program sets it.  Its number, or -1. */
int tp_dbt_dead_reg(void)
{
	ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
	const struct dec *d = &D.d[0];
	ZydisDecodedInstruction zi;
	int r, s, w, ws;

	if (D.n < 1 ||
	    (d->in.mnemonic != ZYDIS_MNEMONIC_MOV && d->in.mnemonic != ZYDIS_MNEMONIC_LEA))
		return -1;
	if (ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, d->b, d->have, &zi, ops)) ||
	    zi.operand_count_visible != 2 || ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER ||
	    ops[0].actions != ZYDIS_OPERAND_ACTION_WRITE)
		return -1;
	r = gpr(ops[0].reg.value, &w);
	if (r < 0 || r == 4 || w < 32) /* never rsp; a narrower write merges */
		return -1;
	switch (ops[1].type) {
	case ZYDIS_OPERAND_TYPE_IMMEDIATE:
		return r;
	case ZYDIS_OPERAND_TYPE_REGISTER: /* a general register: not a control register */
		s = gpr(ops[1].reg.value, &ws);
		return s >= 0 && s != r ? r : -1;
	case ZYDIS_OPERAND_TYPE_MEMORY: /* lea reads no memory */
		if (zi.mnemonic != ZYDIS_MNEMONIC_LEA || gpr(ops[1].mem.base, &ws) == r ||
		    gpr(ops[1].mem.index, &ws) == r)
			return -1;
		return r;
	default:
		return -1;
	}
}

static void put_stub(struct tp_arch_writer *w, uint64_t target)
{
	size_t at;

	/* 8-aligned, so that linking's write of its first bytes is one store */
	if (tp_arch_writer_pc(w) & 7)
		tp_arch_put_nop(w, 8 - (tp_arch_writer_pc(w) & 7));
	at = w->len;
	tp_dbt_map_mark(at, 0, TP_DBT_MK_STUB);
	TPL(w, stub);
	if (C.nstubs < (int)(sizeof(C.stub_at) / sizeof(C.stub_at[0]))) {
		C.stub_at[C.nstubs] = (uint32_t)at;
		C.stub_to[C.nstubs++] = target;
	}
	if (!w->err)
		memcpy(w->buf + at + TP_DBT_STUB_TARGET, &target, 8);
}

static void put_gate(struct tp_arch_writer *w, int32_t reason)
{
	size_t at = w->len;

	TPL(w, gate);
	if (!w->err)
		memcpy(w->buf + at + (tp_dbt_tpl_gate_reason - tp_dbt_tpl_gate) - 4, &reason, 4);
}

/* Bytes the decoder does not know, at @cur: a block of their own that raises the CPU's
 * #UD there (SIGILL at the program's pc, as natively), after the gate has said so if the
 * program dies of it (the decoder may know less than the CPU).  A fault: not counted. */
static void put_undecodable(struct tp_arch_writer *w, uint64_t cur, uint64_t pc)
{
	if (cur != pc) {
		put_stub(w, cur);
		return;
	}
	put_gate(w, TP_DBT_GATE_UNDECODABLE);
	tp_arch_put_data(w, "\x0f\x0b", 2); /* ud2 */
}

/* "call/jmp r/m64" (ff /2, ff /4) as "mov rax, r/m64" with the same operand: the
 * prefixes that only hint (notrack, bnd) go, segment and address-size ones stay. */
static int put_load_target(struct tp_arch_writer *w, const uint8_t *b, const struct tp_insn *in)
{
	uint8_t out[TP_ARCH_MAX_INSN_LEN + 1];
	size_t i = 0, n = 0, op;
	uint8_t rex = 0, modrm;

	while (i < in->len &&
	       (b[i] == 0x2e || b[i] == 0x3e || b[i] == 0xf2 || b[i] == 0xf3 || b[i] == 0x66 ||
		b[i] == 0x64 || b[i] == 0x65 || b[i] == 0x67 || b[i] == 0x26 || b[i] == 0x36)) {
		if (b[i] == 0x64 || b[i] == 0x65 || b[i] == 0x67)
			out[n++] = b[i];
		i++;
	}
	if (i < in->len && (b[i] & 0xf0) == 0x40)
		rex = b[i++];
	if (i + 2 > in->len || b[i] != 0xff)
		return -ENOTSUP;
	op = i + 1;
	modrm = b[op];
	if (((modrm >> 3) & 7) != 2 && ((modrm >> 3) & 7) != 4)
		return -ENOTSUP; /* far call or jmp */
	out[n++] = (uint8_t)(0x48 | (rex & 3));
	out[n++] = 0x8b;
	out[n++] = modrm & 0xc7;
	for (i = op + 1; i < in->len; i++)
		out[n++] = b[i];
	if (in->flags & TP_INSN_F_RIPREL) {
		/* mod 00 rm 101: the disp32 follows the modrm and ends the instruction */
		int64_t d = (int64_t)(in->target - (tp_arch_writer_pc(w) + n));
		int32_t rel = (int32_t)d;

		if (d != rel)
			return -ERANGE;
		memcpy(out + n - 4, &rel, 4);
	}
	tp_arch_put_data(w, out, n);
	return 0;
}

/* A relocated copy of the instruction at @pc into the writer. */
static int put_copy(struct tp_arch_writer *w, const uint8_t *b, const struct tp_insn *in,
		    uint64_t pc)
{
	size_t n;
	int err;

	if (w->cap - w->len < 64)
		return -ENOSPC;
	/* what does not depend on where it runs is copied as the relocator would */
	if (!(in->flags & (TP_INSN_F_RIPREL | TP_INSN_F_RELBR))) {
		tp_arch_put_data(w, b, in->len);
		return w->err;
	}
	err = tp_arch_relocate(b, in->len, pc, tp_arch_writer_pc(w), w->buf + w->len,
			       w->cap - w->len, &n);
	if (!err)
		w->len += n;
	return err;
}

/* The block at @pc, written at the chunk's end; 0 after tp_dbt_fail(). */
static uint64_t translate(uint64_t pc)
{
	struct tp_dbt_chunk *c = tp_dbt_chunk_for(pc);
	struct tp_arch_writer w;
	uint64_t start, cur = pc;
	uint32_t ninsn = 0;
	size_t len;
	int done = 0, err = 0;

	if (!c) {
		tp_dbt_fail("no memory for the code cache near", pc);
		return 0;
	}
	start = c->rx + c->used;
	tp_arch_writer_init(&w, C.buf, sizeof(C.buf), start);
	D.n = 0; /* nothing decoded ahead for this block yet */
	C.nstubs = 0;
	tp_dbt_map_begin();
	tp_dbt_map_mark(0, 0, TP_DBT_MK_HIDDEN);
	tp_dbt_client_block_begin(pc, &w);
	while (!done && !err && !w.err) {
		struct dec spare;
		const struct dec *d = decode_nth((int)ninsn, cur, &spare);
		const uint8_t *b;
		struct tp_insn in;
		uint64_t next;

		if (!d) {
			put_undecodable(&w, cur, pc);
			break;
		}
		b = d->b;
		in = d->in;
		next = cur + in.len;
		ninsn++;
		/* a handler interrupting this instruction's code sees its address, and the
		 * next one's once the instruction is done */
		tp_dbt_map_mark(w.len, cur - pc, TP_DBT_MK_HIDDEN);
		tp_dbt_client_insn(cur, b, &in, &w, TP_DBT_CL_BEFORE);
		/* a jcc rel32's rel32 4-aligned, for linking to write in one store */
		if (in.kind == TP_INSN_JCC && b[0] != 0xe0 && b[0] != 0xe1 && b[0] != 0xe2 &&
		    b[0] != 0xe3 && ((tp_arch_writer_pc(&w) + 2) & 3))
			tp_arch_put_nop(&w, 4 - ((tp_arch_writer_pc(&w) + 2) & 3));
		tp_dbt_map_mark(w.len, cur - pc, TP_DBT_MK_INSN);
		switch (in.kind) {
		case TP_INSN_OTHER:
			err = put_copy(&w, b, &in, cur);
			tp_dbt_map_mark(w.len, next - pc, TP_DBT_MK_HIDDEN);
			tp_dbt_client_insn(cur, b, &in, &w, TP_DBT_CL_AFTER);
			break;
		case TP_INSN_JMP:
			done = 1;
			if (in.flags & TP_INSN_F_INDIRECT) {
				TPL(&w, save_rax);
				err = put_load_target(&w, b, &in);
				tp_dbt_map_mark(w.len, cur - pc, TP_DBT_MK_LOOKUP);
				tp_dbt_client_insn(cur, b, &in, &w, TP_DBT_CL_BRANCH);
				TPL(&w, to_ibl);
			} else {
				/* a byte of its own before the stub, for a breakpoint */
				if (!(tp_arch_writer_pc(&w) & 7))
					tp_arch_put_nop(&w, 8);
				put_stub(&w, in.target);
			}
			break;
		case TP_INSN_CALL:
			done = 1;
			if (in.flags & TP_INSN_F_INDIRECT) {
				TPL(&w, save_rax);
				err = put_load_target(&w, b, &in);
				tp_arch_put_push_u64(&w, next);
				tp_dbt_map_mark(w.len, cur - pc, TP_DBT_MK_LOOKUP);
				tp_dbt_client_insn(cur, b, &in, &w, TP_DBT_CL_BRANCH);
				TPL(&w, to_ibl);
			} else {
				tp_arch_put_push_u64(&w, next);
				put_stub(&w, in.target);
			}
			break;
		case TP_INSN_JCC: {
			/* the relocator re-aims the branch: decoded as if at the address from
			 * which its target is the taken exit's stub */
			uint64_t rel = in.target - next, here = tp_arch_writer_pc(&w);
			size_t n;

			/* jcc rel32 (6), or loop/jrcxz with its hop (3 + 2 + 5), then the
			 * fall-through stub (8-aligned), then the taken one */
			uint64_t taken = ((here + 10 + 7) & ~7ull) + TP_DBT_STUB_SIZE;

			uint8_t *out = w.buf + w.len;
			int jcc32;

			err = tp_arch_relocate(b, in.len, taken - rel - in.len, here, out,
					       w.cap - w.len, &n);
			if (err)
				break;
			jcc32 = n == 6 && out[0] == 0x0f && (out[1] & 0xf0) == 0x80 &&
				!((here + 2) & 3);
			w.len += n;
			put_stub(&w, next);
			if (tp_arch_writer_pc(&w) > taken) {
				err = -ENOSPC;
				break;
			}
			tp_arch_put_nop(&w, taken - tp_arch_writer_pc(&w));
			/* put_stub aligns to 8 first: no padding at an 8-aligned pc */
			n = w.len;
			put_stub(&w, in.target);
			if (jcc32 && !w.err) {
				uint64_t mark = TP_DBT_STUB_JCC | (taken - (here + 2));

				memcpy(w.buf + n + TP_DBT_STUB_LINK, &mark, 8);
			}
			done = 1;
			break;
		}
		case TP_INSN_RET: {
			size_t op = 0;

			done = 1;
			while (op < in.len && (b[op] == 0xf2 || b[op] == 0xf3 || b[op] == 0x66 ||
					       b[op] == 0x2e || b[op] == 0x3e))
				op++;
			if (op >= in.len || (b[op] != 0xc3 && b[op] != 0xc2)) {
				err = -ENOTSUP; /* iret, far ret */
				break;
			}
			TPL(&w, save_rax);
			tp_arch_put_pop_reg(&w, TP_REG_RAX);
			if (b[op] == 0xc2 && op + 3 <= in.len) {
				uint16_t imm;

				memcpy(&imm, b + op + 1, 2);
				tp_arch_put_lea_rsp(&w, imm);
			}
			tp_dbt_map_mark(w.len, cur - pc, TP_DBT_MK_LOOKUP);
			tp_dbt_client_insn(cur, b, &in, &w, TP_DBT_CL_BRANCH);
			TPL(&w, to_ibl);
			break;
		}
		case TP_INSN_SYSCALL: {
			size_t at;

			done = 1;
			if (b[0] == 0x0f && b[1] == 0x05 && in.len == 2)
				put_gate(&w, TP_DBT_GATE_SYSCALL);
			tp_arch_put_data(&w, b, in.len);
			at = w.len;
			tp_dbt_map_mark(at, next - pc, TP_DBT_MK_HIDDEN);
			TPL(&w, sysret);
			if (!w.err)
				memcpy(w.buf + at + 2, &next, 8);
			put_stub(&w, next);
			break;
		}
		case TP_INSN_INT3:
			done = 1;
			tp_arch_put_data(&w, b, in.len);
			put_stub(&w, next);
			break;
		default: /* traps: hlt, ud2, int n (which leaves the pc after itself) */
			done = 1;
			tp_arch_put_data(&w, b, in.len);
			tp_dbt_map_mark(w.len, next - pc, TP_DBT_MK_HIDDEN);
			put_stub(&w, next);
			break;
		}
		cur = next;
		if (!done && (ninsn >= BLOCK_MAX_INSNS || tp_dbt_client_block_at(cur))) {
			put_stub(&w, cur);
			done = 1;
		}
	}
	if (!err)
		err = tp_arch_writer_finish(&w, &len);
	if (err) {
		tp_dbt_fail(err == -ERANGE ? "an operand out of reach of the code cache at"
					   : "an instruction the code cache cannot move",
			    cur);
		return 0;
	}
	/* the block table's lines that its insertion and the linking of its exits probe next:
	 * 2 MiB for python3's start-up, each probe a cache miss when it comes */
	__builtin_prefetch(&C.table[hash(pc, C.bits)], 1);
	for (int k = 0; k < C.nstubs; k++)
		__builtin_prefetch(&C.table[hash(C.stub_to[k], C.bits)]);
	tp_dbt_client_block_end(pc, cur, C.buf, len);
	C.last_end = cur;
	if (cache_write(start, C.buf, len)) {
		tp_dbt_fail("cannot write into the code cache at", start);
		return 0;
	}
	tp_dbt_map_commit(c->rx, c->rw, start, len, pc, cur);
	c->used = (c->used + len + 15) & ~15ull;
	return start;
}

/* libZydis is built with the stack protector: it reads its canary at %fs:0x28.  Before
 * the program's loader set up TLS, %fs is 0, so a private TCB stands in, installed once and
 * kept until the program sets %fs (through the gate, which reports 0 to ARCH_GET_FS
 * meanwhile): the loader reads nothing at %fs before, and two arch_prctl a translation
 * were most of the start-up's cost. */
static void tls_enter(void)
{
	static uint64_t tcb[64];
	struct tp_dbt_thread *t = tp_dbt_self();

	/* the program sets %fs only through the gate or clone, which keep t->fs up to date */
	if (t->fs || t->tcb_in)
		return;
	tcb[0] = (uint64_t)(uintptr_t)tcb;
	tcb[5] = 0x5f7470646274aa00ull;
	tp_raw2(SYS_arch_prctl, ARCH_SET_FS, tcb);
	t->tcb_in = 1;
}

static int page_find(uint64_t page, uint64_t *slot)
{
	uint64_t mask = (1ull << C.page_bits) - 1, i = hash(page << 12, C.page_bits);

	for (;; i = (i + 1) & mask) {
		if (C.pages[i] == page + 1 || !C.pages[i]) {
			*slot = i;
			return C.pages[i] != 0;
		}
	}
}

/* The page set at twice its size; -ENOMEM (the old one stays unused: the heap never
 * frees). */
static int pages_grow(void)
{
	uint64_t *old = C.pages, n = 1ull << C.page_bits, i;

	if (C.page_bits >= PAGE_BITS ||
	    !(C.pages = tp_dbt_alloc(sizeof(uint64_t) << (C.page_bits + 1)))) {
		C.pages = old;
		return -ENOMEM;
	}
	C.page_bits++;
	for (uint64_t k = 0; k < n; k++)
		if (old[k] && !page_find(old[k] - 1, &i))
			C.pages[i] = old[k];
	return 0;
}

static void page_add(uint64_t page)
{
	uint64_t i;

	tp_dbt_smc_watch(page);
	if (C.pages_full || page_find(page, &i))
		return;
	if (C.npages >= (1ull << C.page_bits) / 2) {
		if (pages_grow()) {
			C.pages_full = 1; /* from now on every unmapping invalidates */
			return;
		}
		page_find(page, &i);
	}
	C.pages[i] = page + 1;
	C.npages++;
}

/* Drop the translations of code in [@start, @end), which the program unmaps, moves or
 * reprotects: the next execution there is translated again from what is there then.
 * Blocks elsewhere reach code of another mapping only through the lookup table (calls
 * between objects go through the PLT), which is cleared; the chunks are not reused. */
void tp_dbt_invalidate(uint64_t start, uint64_t end)
{
	uint64_t mask = (1ull << C.bits) - 1, hit = C.pages_full, n = 0, i;

	if (end <= start)
		return;
	for (uint64_t p = start >> 12; !hit && p <= (end - 1) >> 12; p++)
		hit = page_find(p, &i);
	if (!hit)
		return;
	/* a block may begin up to a page before the range and run into it */
	start = start > 4096 ? start - 4096 : 0;
	for (i = 0; i <= mask; i++) {
		struct entry e = C.table[i];

		if (!e.cache)
			continue;
		C.table[i].pc = C.table[i].cache = 0;
		if (e.pc >= start && e.pc < end)
			continue;
		/* re-insert the survivors: open addressing keeps no holes */
		for (uint64_t j = hash(e.pc, C.bits);; j = (j + 1) & mask) {
			if (!C.table[j].cache) {
				C.table[j] = e;
				n++;
				break;
			}
		}
	}
	C.nblocks = n;
	tp_dbt_map_stale(start, end);
	tp_dbt_chunks_unlink(start, end);
	tp_dbt_tables_clear();
}

/* The block table at twice its size (the old one stays unused: the heap never frees). */
static int table_grow(void)
{
	uint64_t mask = (2ull << C.bits) - 1;
	struct entry *t;

	if (C.bits >= TABLE_BITS || !(t = tp_dbt_alloc(sizeof(struct entry) << (C.bits + 1))))
		return -ENOMEM;
	for (uint64_t i = 0; i < 1ull << C.bits; i++) {
		uint64_t j;

		if (!C.table[i].cache)
			continue;
		for (j = hash(C.table[i].pc, C.bits + 1); t[j].cache; j = (j + 1) & mask)
			;
		t[j] = C.table[i];
	}
	C.table = t;
	C.bits++;
	return 0;
}

/* The translation of @pc, or 0 (nothing is translated). */
static uint64_t find(uint64_t pc)
{
	uint64_t mask = (1ull << C.bits) - 1, i = hash(pc, C.bits);

	for (;; i = (i + 1) & mask) {
		if (C.table[i].pc == pc && C.table[i].cache)
			return C.table[i].cache;
		if (!C.table[i].cache)
			return 0;
	}
}

/* The exits of the block just translated at @cache whose targets are translated already are
 * linked now: each would cost a dispatch (the runtime's entry and exit, a lookup) the first
 * time it is taken (python3 -c pass: 40,000 dispatches of direct exits). */
static void link_known(uint64_t cache)
{
	for (int k = 0; k < C.nstubs; k++) {
		uint64_t to = find(C.stub_to[k]);

		if (to)
			tp_dbt_chunk_link(cache + C.stub_at[k], to);
	}
	C.nstubs = 0;
}

uint64_t tp_dbt_lookup(uint64_t pc)
{
	uint64_t mask = (1ull << C.bits) - 1, i = hash(pc, C.bits), cache;

	for (;; i = (i + 1) & mask) {
		if (C.table[i].pc == pc && C.table[i].cache)
			return C.table[i].cache;
		if (!C.table[i].cache)
			break;
	}
	if (C.nblocks >= mask / 2 && table_grow()) {
		tp_dbt_fail("the code cache's block table is full", pc);
		return 0;
	}
	{
		tls_enter();
		cache = translate(pc);
		/* a flush cleared the table meanwhile, or another thread filled it while this
		 * one waited for room (rt-chunk.c): the first free slot is elsewhere */
		mask = (1ull << C.bits) - 1;
		for (i = hash(pc, C.bits); C.table[i].cache; i = (i + 1) & mask)
			;
	}
	if (!cache)
		return 0;
	C.table[i].pc = pc;
	C.table[i].cache = cache;
	C.nblocks++;
	link_known(cache);
	page_add(pc >> 12);
	page_add((C.last_end - 1) >> 12);
	return cache;
}

/* Nothing sensible is left to run: the counts so far go to tracepad, marked by the
 * failure already recorded. */
static uint64_t give_up(void)
{
	tp_dbt_flush(tp_dbt_self());
	for (;;)
		tp_raw1(SYS_exit_group, 127);
	return 0;
}

uint64_t tp_dbt_translate(uint64_t pc)
{
	return tp_dbt_lookup(pc);
}

/* A dispatch leaves for the chunks in use: where the thread was matters no more. */
static void dispatch_enter(struct tp_dbt_thread *t)
{
	tp_dbt_c_enter(t);
	t->pin = 0;
	t->in_dispatch = 1;
}

static void dispatch_leave(struct tp_dbt_thread *t, uint64_t to)
{
	t->next = to; /* where a signal from here on shows the program (rt-signal.c) */
	t->epoch = tp_dbt_cache_epoch();
	if (!t->vfork_pending)
		t->vfork_pin = 0;
	t->in_dispatch = 0;
	tp_dbt_c_leave(t);
}

uint64_t tp_dbt_dispatch_direct(uint64_t stub, struct tp_dbt_frame *f)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	uint64_t target, to, reuses;

	dispatch_enter(t);
	reuses = tp_dbt_cache_reuses();
	memcpy(&target, (const void *)(uintptr_t)(stub + TP_DBT_STUB_TARGET), 8);
	to = tp_dbt_translate(target);
	if (!to)
		return give_up();
	/* the stub's chunk may hold other code already (this thread was out of it) */
	if (reuses == tp_dbt_cache_reuses())
		tp_dbt_chunk_link(stub, to);
	dispatch_leave(t, to);
	return to;
}

uint64_t tp_dbt_dispatch_indirect(uint64_t pc, struct tp_dbt_frame *f)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	struct entry *e = (struct entry *)(uintptr_t)t->table + (pc & (TP_DBT_IBL_SIZE - 1));
	uint64_t to;

	dispatch_enter(t);
	to = tp_dbt_translate(pc);
	if (!to)
		return give_up();
	/* the lookup reads pc then cache: a half-written entry must not match */
	e->pc = 0;
	e->cache = to;
	e->pc = pc;
	dispatch_leave(t, to);
	return to;
}
