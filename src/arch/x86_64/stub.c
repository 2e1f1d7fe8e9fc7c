/* Stubs that tracepad writes into a traced process, written with the code writer. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/writer-priv.h"

/* rdtsc into the 8 bytes at @addr (rax and rdx clobbered). */
static void put_stamp(struct tp_arch_writer *w, uint64_t addr)
{
	TP_PUT0(w, ZYDIS_MNEMONIC_RDTSC);
	TP_PUT(w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(addr, 4), TP_OP_REG(ZYDIS_REGISTER_EAX));
	TP_PUT(w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(addr + 4, 4), TP_OP_REG(ZYDIS_REGISTER_EDX));
}

/* rax and rdx to or from the record's slots. */
static void put_rax_rdx(struct tp_arch_writer *w, uint64_t rec,
			const struct tp_arch_rstub_layout *l, bool save)
{
	static const ZydisRegister reg[2] = {ZYDIS_REGISTER_RAX, ZYDIS_REGISTER_RDX};
	const uint64_t at[2] = {rec + l->rax, rec + l->rdx};

	for (int i = 0; i < 2; i++) {
		if (save)
			TP_PUT(w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(at[i], 8), TP_OP_REG(reg[i]));
		else
			TP_PUT(w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(reg[i]), TP_OP_RIPMEM(at[i], 8));
	}
}

int tp_arch_emit_return_stub(uint8_t *out, size_t cap, uint64_t at, uint64_t rec,
			     const struct tp_arch_rstub_layout *l, size_t *len)
{
	struct tp_arch_writer w;
	int err;

	tp_arch_writer_init(&w, out, cap, at);
	put_rax_rdx(&w, rec, l, true);
	TP_PUT(&w, ZYDIS_MNEMONIC_MOVQ, TP_OP_RIPMEM(rec + l->xmm0, 8),
	       TP_OP_REG(ZYDIS_REGISTER_XMM0));
	put_stamp(&w, rec + l->tsc);
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_RAX),
	       TP_OP_RIPMEM(rec + l->errno_at, 8));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_EAX),
	       TP_OP_MEM(ZYDIS_REGISTER_RAX, 0, 4));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->err, 4),
	       TP_OP_REG(ZYDIS_REGISTER_EAX));
	put_rax_rdx(&w, rec, l, false);
	TP_PUT(&w, ZYDIS_MNEMONIC_PUSH, TP_OP_RIPMEM(rec + l->ret, 8));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->done, 4), TP_OP_IMM(1));
	tp_arch_put_ret(&w);
	err = tp_arch_writer_finish(&w, len);
	return err == -ERANGE ? -EINVAL : err;
}

int tp_arch_emit_entry_stub(uint8_t *out, size_t cap, uint64_t at, uint64_t rec,
			    const struct tp_arch_rstub_layout *l, size_t *len)
{
	struct tp_arch_writer w;
	int err;

	tp_arch_writer_init(&w, out, cap, at);
	put_rax_rdx(&w, rec, l, true);
	put_stamp(&w, rec + l->entry_tsc);
	put_rax_rdx(&w, rec, l, false);
	TP_PUT(&w, ZYDIS_MNEMONIC_JMP, TP_OP_RIPMEM(rec + l->entry_to, 8));
	err = tp_arch_writer_finish(&w, len);
	return err == -ERANGE ? -EINVAL : err;
}
