/* Stubs that tracepad writes into a traced process, written with the code writer. */
#include <errno.h>
#include <string.h>

#include <Zydis/Zydis.h>

#include "arch/arch.h"
#include "arch/x86_64/writer-priv.h"

int tp_arch_emit_return_stub(uint8_t *out, size_t cap, uint64_t at, uint64_t rec,
			     const struct tp_arch_rstub_layout *l, size_t *len)
{
	struct tp_arch_writer w;
	int err;

	tp_arch_writer_init(&w, out, cap, at);
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->rax, 8),
	       TP_OP_REG(ZYDIS_REGISTER_RAX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->rdx, 8),
	       TP_OP_REG(ZYDIS_REGISTER_RDX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOVQ, TP_OP_RIPMEM(rec + l->xmm0, 8),
	       TP_OP_REG(ZYDIS_REGISTER_XMM0));
	TP_PUT0(&w, ZYDIS_MNEMONIC_RDTSC);
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->tsc, 4),
	       TP_OP_REG(ZYDIS_REGISTER_EAX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->tsc + 4, 4),
	       TP_OP_REG(ZYDIS_REGISTER_EDX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_RAX),
	       TP_OP_RIPMEM(rec + l->errno_at, 8));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_EAX),
	       TP_OP_MEM(ZYDIS_REGISTER_RAX, 0, 4));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->err, 4),
	       TP_OP_REG(ZYDIS_REGISTER_EAX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_RAX),
	       TP_OP_RIPMEM(rec + l->rax, 8));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_RDX),
	       TP_OP_RIPMEM(rec + l->rdx, 8));
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
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->rax, 8),
	       TP_OP_REG(ZYDIS_REGISTER_RAX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->rdx, 8),
	       TP_OP_REG(ZYDIS_REGISTER_RDX));
	TP_PUT0(&w, ZYDIS_MNEMONIC_RDTSC);
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->entry_tsc, 4),
	       TP_OP_REG(ZYDIS_REGISTER_EAX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_RIPMEM(rec + l->entry_tsc + 4, 4),
	       TP_OP_REG(ZYDIS_REGISTER_EDX));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_RAX),
	       TP_OP_RIPMEM(rec + l->rax, 8));
	TP_PUT(&w, ZYDIS_MNEMONIC_MOV, TP_OP_REG(ZYDIS_REGISTER_RDX),
	       TP_OP_RIPMEM(rec + l->rdx, 8));
	TP_PUT(&w, ZYDIS_MNEMONIC_JMP, TP_OP_RIPMEM(rec + l->entry_to, 8));
	err = tp_arch_writer_finish(&w, len);
	return err == -ERANGE ? -EINVAL : err;
}
