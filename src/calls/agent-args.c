/* `tracepad calls --engine agent`'s payloads (hooks-abi.h's plans and pieces): what each
 * function's records carry beyond the registers, planned from its prototype; the pieces read
 * back for formatting, plugins' host.read and host.backtrace, and --bt. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/hooks-abi.h"
#include "calls/agent-priv.h"
#include "calls/unwind.h"

const struct tp_proto *tp_calls_agent_proto(struct session *s, struct func *f)
{
	if (!f->proto_done) {
		f->proto = tp_protos_find(s->protos, f->obj->path, f->name, f->addr - f->obj->bias);
		f->proto_done = true;
	}
	return f->proto;
}

/* ---- payloads: what records carry beyond the integer registers (hooks-abi.h) ---- */

/* Bytes of stack an entry carries for an unwinder: --bt's, or plugins' (which may shrink to
 * the return address alone, SNAP_PROBE). */
static uint16_t snap_bytes(const struct session *s)
{
	return s->o->bt ? BT_BYTES : s->o->nplugins ? SNAP_BYTES : 0;
}

/* The payload bytes function @j's entries (@at_ret 0) or returns may carry: its plan's, with
 * its snap as planned (it may have shrunk since). */
uint32_t tp_calls_agent_room(struct session *s, const struct agent *a, uint32_t j, bool at_ret)
{
	struct tp_hk_plan pl = a->hfs[j].plan;

	if (pl.snap)
		pl.snap = snap_bytes(s);
	return tp_hk_payload_room(&pl, at_ret);
}

/* Each shown function's plan from @first on (those a dlopen added too), from its prototype:
 * what formatting its arguments and return value reads (strings and buffers cut at -s,
 * stack-passed arguments, xmm registers). */
void tp_calls_agent_plan(struct session *s, struct agent *a, uint32_t first)
{
	uint32_t ss = (uint32_t)tp_proto_string_size();

	if (s->o->nplugins && !s->o->bt && !a->nobt)
		a->nobt = calloc(TP_HK_MAX_FUNCS, sizeof(*a->nobt));
	if ((s->o->nplugins || s->o->bt) && !a->walks)
		a->walks = calloc(1, sizeof(*a->walks)); /* NULL: the agent never walks */
	if ((s->o->nplugins || s->o->bt) && !a->memo)
		a->memo = tp_unwind_memo_new(); /* NULL: every backtrace by libdw */
	if (!a->room)
		a->room = calloc(TP_HK_MAX_FUNCS, sizeof(*a->room)); /* NULL: reckoned each time */
	for (uint32_t j = first; j < a->n; j++) {
		struct tp_hk_plan *pl = &a->hfs[j].plan;
		struct tp_proto_reads rd;

		if (!(a->hfs[j].flags & TP_HK_F_SHOWN))
			continue;
		/* plugins read any argument register; formatting those the prototype has (all
		 * six without one) */
		pl->regs = s->o->nplugins || s->need_args ? TP_HK_ENTRY_REGS : 0;
		/* plugins may ask for the backtrace of any call, and memory reads
		 * posix_memalign's *memptr at its return */
		pl->snap = snap_bytes(s);
		pl->out = s->o->nplugins &&
			  !strncmp(a->func_of[j]->name, "posix_memalign",
				   strcspn(a->func_of[j]->name, "@")) &&
			  strcspn(a->func_of[j]->name, "@") == strlen("posix_memalign");
		if (!s->need_args)
			continue;
		tp_proto_reads(tp_calls_agent_proto(s, a->func_of[j]), &rd);
		if (!s->o->nplugins && tp_calls_agent_proto(s, a->func_of[j]))
			pl->regs =
			    (uint8_t)(rd.nint < TP_HK_ENTRY_REGS ? rd.nint : TP_HK_ENTRY_REGS);
		for (int k = 0; k < rd.nargs && pl->nargs < TP_HK_PLAN_ARGS; k++)
			if (rd.arg[k].src <= UINT8_MAX && rd.arg[k].len_src <= UINT8_MAX)
				pl->arg[pl->nargs++] = (struct tp_hk_arg){
				    rd.arg[k].buf ? TP_HK_OP_BUF : TP_HK_OP_STR,
				    (uint8_t)rd.arg[k].src, (uint8_t)rd.arg[k].len_src, 0,
				    rd.arg[k].buf ? ss : ss + 1};
		pl->nxmm = (uint8_t)(rd.nsse > 8 ? 8 : rd.nsse);
		pl->stack = (uint16_t)(rd.stack > STACK_MAX ? STACK_MAX : rd.stack);
		pl->ret = rd.ret == TP_PROTO_RET_XMM0  ? TP_HK_RET_XMM0
			  : rd.ret == TP_PROTO_RET_ST0 ? TP_HK_RET_ST0
			  : rd.ret == TP_PROTO_RET_STR ? TP_HK_RET_STR
						       : 0;
		pl->ret_max = (uint16_t)(ss + 1);
	}
	/* the drain's bound of each record's size, reckoned once (plans change only here) */
	for (uint32_t j = first; a->room && j < a->n; j++)
		for (int at_ret = 0; at_ret < 2; at_ret++)
			a->room[j][at_ret] = tp_calls_agent_room(s, a, j, at_ret);
}

static const struct tp_hk_piece *piece_next(const struct tp_calls_pieces *ps, uint32_t *off)
{
	const struct tp_hk_piece *h = (const void *)(ps->p + *off);

	if (*off + sizeof(*h) > ps->len || h->len > ps->len - *off - sizeof(*h))
		return NULL;
	*off += sizeof(*h) + ((h->len + 7) & ~7u);
	return h;
}

/* tp_proto_mem_fn over the pieces: as tp_proc_read, short where the agent's copy stopped. */
ssize_t tp_calls_agent_piece_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	const struct tp_calls_pieces *ps = ctx;
	const struct tp_hk_piece *h;
	uint32_t off = 0;
	ssize_t best = -EFAULT;

	while ((h = piece_next(ps, &off)))
		if (h->what == TP_HK_P_MEM && addr >= h->addr && addr - h->addr < h->len) {
			size_t n = h->len - (addr - h->addr);

			n = n < len ? n : len;
			if ((ssize_t)n > best) {
				memcpy(buf, (const uint8_t *)(h + 1) + (addr - h->addr), n);
				best = (ssize_t)n;
			}
		}
	return best;
}

/* The vector registers a record carries, in @fp; false when none (@fp left as it was). */
bool tp_calls_agent_piece_fp(const struct tp_calls_pieces *ps, struct user_fpregs_struct *fp)
{
	const struct tp_hk_piece *h;
	uint32_t off = 0;
	bool any = false;

	while ((h = piece_next(ps, &off))) {
		if (h->what != TP_HK_P_XMM && (h->what != TP_HK_P_ST0 || h->len != 10))
			continue;
		/* cleared at the first vector piece only: clearing its 512 bytes for every
		 * record (nearly none carries one) was 7% of tracepad's time a call */
		if (!any)
			memset(fp, 0, sizeof(*fp));
		if (h->what == TP_HK_P_XMM)
			for (uint32_t i = 0; i < h->len / 8 && i < 8; i++)
				memcpy(&fp->xmm_space[4 * i], (const uint8_t *)(h + 1) + 8 * i, 8);
		else
			memcpy(fp->st_space, h + 1, 10);
		any = true;
	}
	return any;
}

/* The pieces after @h's registers (peek() checked the size). */
struct tp_calls_pieces tp_calls_agent_pieces(const struct tp_hk_rec *h)
{
	uint32_t head = TP_HK_REC_SIZE(tp_hk_rec_nregs(h));

	return (struct tp_calls_pieces){(const uint8_t *)h + head, h->size - head};
}

/* The entry whose plugins' call() runs (host.backtrace): its thread, its stack copy, its
 * registers; the record whose call() or ret() runs (host.read). */
static const struct tp_hk_rec *cur_entry, *cur_rec;
static const struct agent *cur_agent;
static pid_t cur_tid;

ssize_t tp_calls_agent_read(struct session *s, pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct tp_calls_pieces ps;

	(void)s;
	if (!cur_rec || !cur_agent || pid != cur_agent->pid)
		return -ENOENT;
	ps = tp_calls_agent_pieces(cur_rec);
	return tp_calls_agent_piece_read(&ps, addr, buf, len) == (ssize_t)len ? (ssize_t)len
									      : -ENOENT;
}

/* A record's memory pieces found once for the unwinder's every word (in their order, as
 * tp_calls_agent_piece_read() tries them). */
#define SNAP_PIECES 8
struct snap {
	const struct tp_hk_piece *mem[SNAP_PIECES];
	unsigned n;
	struct tp_calls_pieces ps; /* all of them, when more than SNAP_PIECES */
};

/* Words of the stack copy; outside it, 0: the unwinder stops there.  As
 * tp_calls_agent_piece_read() for 8 bytes: the first piece that holds them all. */
static bool snap_word(void *arg, pid_t tid, uint64_t addr, uint64_t *val)
{
	const struct snap *sn = arg;

	(void)tid;
	if (sn->n > SNAP_PIECES) {
		if (tp_calls_agent_piece_read((void *)&sn->ps, addr, val, 8) != 8)
			*val = 0;
		return true;
	}
	for (unsigned i = 0; i < sn->n; i++) {
		const struct tp_hk_piece *h = sn->mem[i];

		if (addr >= h->addr && addr - h->addr < h->len && h->len - (addr - h->addr) >= 8) {
			memcpy(val, (const uint8_t *)(h + 1) + (addr - h->addr), 8);
			return true;
		}
	}
	*val = 0;
	return true;
}

/* ---- backtraces the agent walks (plan.walk, the block's CFA table) ---- */

static struct tp_hk_cfa *cfa_table(const struct agent *a)
{
	return (struct tp_hk_cfa *)((uint8_t *)a->ctl + a->ctl->cfa_off);
}

/* Return address @ra's rule into the CFA table, unless it is there or has no room. */
static void rule_put(const struct agent *a, uint64_t ra, const struct tp_unwind_rule *r)
{
	struct tp_hk_cfa *tab = cfa_table(a);
	uint64_t rule = TP_HK_CFA_VALID;
	uint32_t i = tp_hk_cfa_hash(ra);

	if (r->end)
		rule |= TP_HK_CFA_END;
	else
		rule |=
		    (uint32_t)(int32_t)r->cfa_off | (r->cfa_rbp ? TP_HK_CFA_BP : 0) |
		    (r->rbp_saved ? TP_HK_CFA_BP_SAVED | (uint64_t)(uint16_t)r->rbp_off << 32 : 0);
	for (uint32_t k = 0; k < TP_HK_CFA_PROBES; k++, i = (i + 1) & (TP_HK_CFA_SLOTS - 1)) {
		if (tab[i].ra == ra)
			return;
		if (tab[i].ra)
			continue;
		/* the rule before the address that makes it found */
		__atomic_store_n(&tab[i].rule, rule, __ATOMIC_RELEASE);
		__atomic_store_n(&tab[i].ra, ra, __ATOMIC_RELEASE);
		a->walks->rules++;
		return;
	}
	a->walks->full = true;
}

/* What libdw's walk of an entry found, for the agent's next walks: the rule of each return
 * address on the way (the last one's too, which says whether the stack ends there). */
static void learn_walk(const struct agent *a, struct tp_unwinder *uw, const uint64_t *pcs, int n)
{
	for (int i = 1; i < n && !a->walks->full; i++) {
		struct tp_unwind_rule r;

		if (!tp_unwinder_rule(uw, pcs[i], true, &r))
			rule_put(a, pcs[i], &r);
	}
}

/* Function @j's entries are walked by the agent from now on, up to @max frames, when the CFI
 * at its first instruction is the usual one (CFA rsp + 8, rbp the caller's), from which the
 * agent's walk starts. */
static void walk_plan(const struct agent *a, struct tp_unwinder *uw, uint32_t j, int max)
{
	struct tp_hk_plan *pl = &a->hfs[j].plan;
	uint8_t *fn = &a->walks->fn[j];
	struct tp_unwind_rule r;

	if (*fn == 0)
		*fn = !tp_unwinder_rule(uw, a->hfs[j].addr, false, &r) && !r.end && !r.cfa_rbp &&
			      r.cfa_off == 8 && !r.rbp_saved
			  ? 1
			  : 2;
	max = max < 255 ? max : 255;
	if (*fn == 1 && pl->snap > 8 && pl->walk < max)
		__atomic_store_n(&pl->walk, (uint8_t)max, __ATOMIC_RELAXED);
}

void tp_calls_agent_walks_reset(struct agent *a)
{
	if (!a->walks || !a->ctl)
		return;
	for (uint32_t i = 0; i < TP_HK_CFA_SLOTS; i++)
		__atomic_store_n(&cfa_table(a)[i].ra, 0, __ATOMIC_RELEASE);
	a->walks->full = false;
}

/* Entry @h's backtrace (plugins' and --bt's): the agent's walk, else libdw's unwinding of
 * the registers and the stack copy it carries (its plan's snap). */
int tp_calls_agent_unwind(struct session *s, const struct agent *a, pid_t tid,
			  const struct tp_hk_rec *h, uint64_t *pcs, int max, bool learn)
{
	struct tp_calls_pieces ps = tp_calls_agent_pieces(h);
	const struct tp_hk_piece *p;
	struct user_regs_struct regs = {0};
	struct image *im = a->im ? a->im : tp_calls_image_of(s, a->pid);
	uint32_t off = 0;
	struct snap sn = {.ps = ps};
	int n;

	if (!im)
		return -ESRCH;
	if (!im->uw && !(im->uw = tp_unwinder_new(im->pid)))
		return -errno;
	while ((p = piece_next(&ps, &off)))
		if (p->what == TP_HK_P_PCS && p->len >= 8) {
			n = (int)(p->len / 8) < max ? (int)(p->len / 8) : max;
			memcpy(pcs, p + 1, (size_t)n * 8);
			if (a->walks)
				a->walks->walked++;
			return n;
		} else if (p->what == TP_HK_P_MEM && sn.n++ < SNAP_PIECES)
			sn.mem[sn.n - 1] = p;
		else if (p->what == TP_HK_P_REGS && p->len == 48) {
			const uint64_t *v = (const void *)(p + 1);

			regs.rbx = v[0];
			regs.rbp = v[1];
			regs.r12 = v[2];
			regs.r13 = v[3];
			regs.r14 = v[4];
			regs.r15 = v[5];
		}
	regs.rdi = tp_hk_rec_reg(h, 0);
	regs.rsi = tp_hk_rec_reg(h, 1);
	regs.rdx = tp_hk_rec_reg(h, 2);
	regs.rcx = tp_hk_rec_reg(h, 3);
	regs.r8 = tp_hk_rec_reg(h, 4);
	regs.r9 = tp_hk_rec_reg(h, 5);
	regs.rsp = h->sp;
	regs.rip = a->func_of[h->func]->addr;
	/* the same stack as before: the frames found then (a malloc loop's every call) */
	n = a->memo
		? tp_unwind_memo_backtrace(a->memo, im->uw, tid, &regs, snap_word, &sn, pcs, max)
		: tp_unwinder_backtrace(im->uw, tid, &regs, snap_word, &sn, pcs, max);
	if (a->walks && n > 0) {
		a->walks->unwound++;
		if (learn) {
			learn_walk(a, im->uw, pcs, n);
			walk_plan(a, im->uw, h->func, max);
		}
	}
	return n;
}

void tp_calls_agent_current(const struct agent *a, pid_t tid, const struct tp_hk_rec *entry,
			    const struct tp_hk_rec *rec)
{
	cur_agent = a;
	cur_tid = tid;
	cur_entry = entry;
	cur_rec = rec;
}

int tp_calls_agent_backtrace(struct session *s, pid_t tid, uint64_t *pcs, int max)
{
	if (!cur_entry || cur_tid != tid || !cur_agent)
		return -ESRCH;
	if (cur_agent->nobt)
		cur_agent->nobt[cur_entry->func] = UINT16_MAX;
	/* plugins are for the process hooked alone (not with -f) */
	return tp_calls_agent_unwind(s, cur_agent, tid, cur_entry, pcs, max, !s->o->follow);
}
