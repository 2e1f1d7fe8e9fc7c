/* Call hooks' payloads (hooks-abi.h): the memory and the vector registers a call's record
 * carries after it, as tracepad planned per function from its prototype, so that tracepad
 * formats strings, buffers, stack-passed and float arguments and return values as the ptrace
 * engine does from a stopped thread.  Memory is copied page by page with rt's guarded reads:
 * a bad pointer gives a short piece, never a fault of the program.  General-regs-only: the
 * xmm registers are read with one movq each, before anything could change them. */
#include "agent/hooks-args.h"
#include "rt/rt.h"

#define PAGE 4096u

static uint32_t round8(uint32_t n)
{
	return (n + 7) & ~7u;
}

/* Up to @max bytes at @addr, page by page, up to a NUL (included) when @str: the bytes
 * copied (fewer where the memory stops being readable). */
static uint32_t copy(uint8_t *dst, uint64_t addr, uint32_t max, int str)
{
	uint32_t n = 0;

	if (max > TP_HK_PIECE_MAX)
		max = TP_HK_PIECE_MAX;
	while (n < max) {
		uint32_t chunk = PAGE - (uint32_t)((addr + n) & (PAGE - 1));

		if (chunk > max - n)
			chunk = max - n;
		if (tp_rt_mem_read_fast(addr + n, dst + n, chunk))
			break;
		for (uint32_t i = n; str && i < n + chunk; i++)
			if (!dst[i])
				return i + 1;
		n += chunk;
	}
	return n;
}

static uint8_t *piece(uint8_t *at, uint16_t what, uint64_t addr, uint32_t len)
{
	struct tp_hk_piece *h = (struct tp_hk_piece *)at;

	h->addr = addr;
	h->len = len;
	h->what = what;
	h->pad = 0;
	return at + sizeof(*h) + round8(len);
}

/* An argument's value: a register, or a stack slot above the return address (0 when it
 * cannot be read). */
static uint64_t value(const struct tp_rt_regs *r, uint8_t src)
{
	const uint64_t regs[6] = {r->rdi, r->rsi, r->rdx, r->rcx, r->r8, r->r9};
	uint64_t v = 0;

	if (src < TP_HK_SRC_STACK)
		return regs[src];
	if (tp_rt_mem_read_fast(r->rsp + 8 + 8 * (uint64_t)(src - TP_HK_SRC_STACK), &v, 8))
		return 0;
	return v;
}

static uint8_t *xmm(uint8_t *at)
{
	uint64_t *v = (uint64_t *)(at + sizeof(struct tp_hk_piece));

	__asm__("movq %%xmm0, %0" : "=r"(v[0]));
	__asm__("movq %%xmm1, %0" : "=r"(v[1]));
	__asm__("movq %%xmm2, %0" : "=r"(v[2]));
	__asm__("movq %%xmm3, %0" : "=r"(v[3]));
	__asm__("movq %%xmm4, %0" : "=r"(v[4]));
	__asm__("movq %%xmm5, %0" : "=r"(v[5]));
	__asm__("movq %%xmm6, %0" : "=r"(v[6]));
	__asm__("movq %%xmm7, %0" : "=r"(v[7]));
	return piece(at, TP_HK_P_XMM, 0, 64);
}

uint32_t tp_hk_payload_entry(uint8_t *dst, const struct tp_hk_plan *p, const struct tp_rt_regs *r,
			     int vregs)
{
	uint8_t *at = dst;

	/* first: nothing below touches a vector register, but say so in one place */
	if (p->nxmm && vregs)
		at = xmm(at);
	for (uint32_t i = 0; i < p->nargs && i < TP_HK_PLAN_ARGS; i++) {
		const struct tp_hk_arg *a = &p->arg[i];
		uint64_t addr = value(r, a->src), max = a->max;
		uint8_t *data = at + sizeof(struct tp_hk_piece);

		if (!addr)
			continue; /* NULL: shown as such */
		if (a->op == TP_HK_OP_BUF) {
			uint64_t len = value(r, a->len_src);

			max = len < max ? len : max;
		}
		at = piece(at, TP_HK_P_MEM, addr,
			   copy(data, addr, (uint32_t)max, a->op == TP_HK_OP_STR));
	}
	if (p->stack)
		at = piece(at, TP_HK_P_MEM, r->rsp + 8,
			   copy(at + sizeof(struct tp_hk_piece), r->rsp + 8, p->stack, 0));
	return (uint32_t)(at - dst);
}

uint32_t tp_hk_payload_snap(uint8_t *dst, const struct tp_hk_plan *p, const struct tp_rt_regs *r,
			    uint64_t **snap)
{
	uint8_t *at = dst;

	*snap = NULL;
	if (p->snap > 8) {
		uint64_t *v = (uint64_t *)(at + sizeof(struct tp_hk_piece));

		v[0] = r->rbx;
		v[1] = r->rbp;
		v[2] = r->r12;
		v[3] = r->r13;
		v[4] = r->r14;
		v[5] = r->r15;
		at = piece(at, TP_HK_P_REGS, 0, 48);
		*snap = (uint64_t *)(at + sizeof(struct tp_hk_piece));
		at = piece(at, TP_HK_P_MEM, r->rsp, copy((uint8_t *)*snap, r->rsp, p->snap, 0));
	} else if (p->snap) {
		/* the return address only (tracepad_call.caller): one load */
		*snap = (uint64_t *)(at + sizeof(struct tp_hk_piece));
		**snap = *(const uint64_t *)(uintptr_t)r->rsp;
		at = piece(at, TP_HK_P_MEM, r->rsp, 8);
	}
	return (uint32_t)(at - dst);
}

uint32_t tp_hk_payload_ret(uint8_t *dst, const struct tp_hk_plan *p, uint64_t rax, uint64_t out)
{
	uint8_t *at = dst, *data = dst + sizeof(struct tp_hk_piece);

	switch (p->ret) {
	case TP_HK_RET_XMM0:
		__asm__("movq %%xmm0, %0" : "=r"(*(uint64_t *)data));
		at = piece(at, TP_HK_P_XMM, 0, 8);
		break;
	case TP_HK_RET_ST0:
		/* a copy of st0 stored and popped: the x87 stack stays as it is */
		__asm__ volatile("fld %%st(0)\n\tfstpt %0" : "=m"(*(uint8_t(*)[10])data));
		at = piece(at, TP_HK_P_ST0, 0, 10);
		break;
	case TP_HK_RET_STR:
		if (rax)
			at = piece(at, TP_HK_P_MEM, rax, copy(data, rax, p->ret_max, 1));
		break;
	default:
		break;
	}
	if (p->out && out)
		at = piece(at, TP_HK_P_MEM, out, copy(at + sizeof(struct tp_hk_piece), out, 8, 0));
	return (uint32_t)(at - dst);
}
