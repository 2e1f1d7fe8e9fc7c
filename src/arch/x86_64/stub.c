/* Stubs that tracepad writes into a traced process, encoded with Zydis's encoder. */
#include <errno.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "bp/rstub.h"

/* Operands of one request: registers, [rip + absolute address], immediates. */
#define REG(r) ((ZydisEncoderOperand){.type = ZYDIS_OPERAND_TYPE_REGISTER, .reg.value = (r)})
#define IMM(v) ((ZydisEncoderOperand){.type = ZYDIS_OPERAND_TYPE_IMMEDIATE, .imm.u = (v)})
#define RIPMEM(a, sz)                                                                              \
	((ZydisEncoderOperand){                                                                    \
	    .type = ZYDIS_OPERAND_TYPE_MEMORY,                                                     \
	    .mem = {.base = ZYDIS_REGISTER_RIP, .displacement = (ZyanI64)(a), .size = (sz)}})
#define BASEMEM(r, sz)                                                                             \
	((ZydisEncoderOperand){.type = ZYDIS_OPERAND_TYPE_MEMORY,                                  \
			       .mem = {.base = (r), .size = (sz)}})

struct emit {
	uint8_t *out;
	size_t cap, len;
	uint64_t at;
	int err;
};

static void put(struct emit *e, ZydisMnemonic m, unsigned nops, const ZydisEncoderOperand *ops)
{
	ZydisEncoderRequest req;
	ZyanUSize n = e->cap - e->len;

	if (e->err)
		return;
	memset(&req, 0, sizeof(req));
	req.machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
	req.mnemonic = m;
	req.operand_count = (ZyanU8)nops;
	memcpy(req.operands, ops, nops * sizeof(*ops));
	if (!ZYAN_SUCCESS(
		ZydisEncoderEncodeInstructionAbsolute(&req, e->out + e->len, &n, e->at + e->len))) {
		e->err = n > e->cap - e->len ? -ENOSPC : -EINVAL;
		return;
	}
	e->len += n;
}

#define PUT(e, m, ...)                                                                             \
	do {                                                                                       \
		const ZydisEncoderOperand ops_[] = {__VA_ARGS__};                                  \
		put(e, m, sizeof(ops_) / sizeof(ops_[0]), ops_);                                   \
	} while (0)

int tp_arch_emit_return_stub(uint8_t *out, size_t cap, uint64_t at, uint64_t rec, size_t *len)
{
	struct emit e = {.out = out, .cap = cap, .at = at};
	const ZydisEncoderOperand none[1] = {{0}};

	PUT(&e, ZYDIS_MNEMONIC_MOV, RIPMEM(rec + TP_RSTUB_RAX, 8), REG(ZYDIS_REGISTER_RAX));
	PUT(&e, ZYDIS_MNEMONIC_MOV, RIPMEM(rec + TP_RSTUB_RDX, 8), REG(ZYDIS_REGISTER_RDX));
	PUT(&e, ZYDIS_MNEMONIC_MOVQ, RIPMEM(rec + TP_RSTUB_XMM0, 8), REG(ZYDIS_REGISTER_XMM0));
	put(&e, ZYDIS_MNEMONIC_RDTSC, 0, none);
	PUT(&e, ZYDIS_MNEMONIC_MOV, RIPMEM(rec + TP_RSTUB_TSC, 4), REG(ZYDIS_REGISTER_EAX));
	PUT(&e, ZYDIS_MNEMONIC_MOV, RIPMEM(rec + TP_RSTUB_TSC + 4, 4), REG(ZYDIS_REGISTER_EDX));
	PUT(&e, ZYDIS_MNEMONIC_MOV, REG(ZYDIS_REGISTER_RAX), RIPMEM(rec + TP_RSTUB_ERRNO_AT, 8));
	PUT(&e, ZYDIS_MNEMONIC_MOV, REG(ZYDIS_REGISTER_EAX), BASEMEM(ZYDIS_REGISTER_RAX, 4));
	PUT(&e, ZYDIS_MNEMONIC_MOV, RIPMEM(rec + TP_RSTUB_ERRNO, 4), REG(ZYDIS_REGISTER_EAX));
	PUT(&e, ZYDIS_MNEMONIC_MOV, REG(ZYDIS_REGISTER_RAX), RIPMEM(rec + TP_RSTUB_RAX, 8));
	PUT(&e, ZYDIS_MNEMONIC_MOV, REG(ZYDIS_REGISTER_RDX), RIPMEM(rec + TP_RSTUB_RDX, 8));
	PUT(&e, ZYDIS_MNEMONIC_PUSH, RIPMEM(rec + TP_RSTUB_RET, 8));
	PUT(&e, ZYDIS_MNEMONIC_MOV, RIPMEM(rec + TP_RSTUB_DONE, 4), IMM(1));
	put(&e, ZYDIS_MNEMONIC_RET, 0, none);
	if (e.err)
		return e.err;
	*len = e.len;
	return 0;
}
