/* The instruction counter, the runtime's first client (rt-client.h).  A whole-program count
 * adds each block's instruction count to the thread's count at the block's entry (one add
 * where the flags are dead, else lea), and a rep string instruction its iterations after
 * it.  With histograms or regions (tracepad asks in the area of count-abi.h), each block
 * and each rep instruction gets a slot instead: the thread's counter of the slot is raised
 * once per execution (per iteration), while the thread counts; the slot's table of program
 * pcs and mnemonics, written at translation, turns the counters into histograms, and the
 * thread's count is their sum, folded at its exit.  Nothing is done per instruction run. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>

#include "dbt/count-abi.h"
#include "dbt/rt-client.h"
#include "rt/raw.h"
#include "rt/rt.h"

/* placeholders in rt-count-tpl.S's templates */
#define ON_PH 0x5a5a0f01u
#define SLOT_PH 0x5a5a0f02u
#define LIMIT_PH 0x5a5a0f03u
#define TARGET_PH 0x5a5a0f04u
#define BELOW_PH 0x5a5a0f05u
#define REASON_PH 0x5a5a0f06u
#define MAX_SLOTS (1u << 20)
#define NOT_IN_REGION (1ull << 63) /* a limit no stack pointer reaches */

extern const uint8_t tp_dbt_tpl_count[], tp_dbt_tpl_count_w[], tp_dbt_tpl_count_n[],
    tp_dbt_tpl_count_end[];
extern const uint8_t tp_dbt_tpl_count_add[], tp_dbt_tpl_count_add_end[];
extern const uint8_t tp_dbt_tpl_count_regs[], tp_dbt_tpl_count_regs_len[];
extern const uint8_t tp_dbt_tpl_rep_pre[], tp_dbt_tpl_rep_post[], tp_dbt_tpl_rep_end[];
extern const uint8_t tp_dbt_tpl_bc_add[], tp_dbt_tpl_bc_add_end[];
extern const uint8_t tp_dbt_tpl_bc_lea[], tp_dbt_tpl_bc_lea_end[];
extern const uint8_t tp_dbt_tpl_brep_post[], tp_dbt_tpl_brep_post_end[];
extern const uint8_t tp_dbt_tpl_rck[], tp_dbt_tpl_rck_end[];

/* What a thread holds at %gs:tls_off (block mode); the templates read the first fields. */
struct tls {
	uint64_t on;	 /* 1 while the thread counts */
	uint64_t limit;	 /* in a --start region: its entry rsp + 8, else NOT_IN_REGION */
	uint64_t target; /* an indirect branch's target, while the runtime checks it */
	uint64_t region_ret, region_sp;
	uint32_t in_region, region_done;
	uint64_t *saved;	      /* the counters as they were at a vfork */
	uint8_t below[256];	      /* 1 for the top bytes of negative numbers */
	uint64_t tsave[TP_DBT_SAVES]; /* target, by signal nesting */
	uint64_t slot[];
};
#define SLOTS_AT offsetof(struct tls, slot)

/* Calls from cache code (tp_dbt_client_put_call). */
enum { CALL_START = 1, CALL_STOP, CALL_STEP_BEGIN, CALL_STEP_END, CALL_CHECK };

static struct {
	struct tp_dbt_counts *area; /* NULL: the whole-program count alone */
	struct tp_dbt_slot *slots;
	struct tp_dbt_insn *insns;
	uint64_t *totals;
	uint32_t max_slots, nslots;
	uint64_t max_insns, ninsns;
	/* the block being translated */
	size_t count_at;
	uint32_t ninsn, slot;
	int cell; /* the count's cell the next block adds to */
	/* the whole-program count's add comes before the block's instruction @defer (its
	 * index, where the flags are dead) into @defer_cell; 0: it came at the entry */
	int defer, idx;
	int32_t defer_cell;
	uint64_t pc;
	struct tp_dbt_insn buf[128];
} K;

static struct tls *tls(struct tp_dbt_thread *t)
{
	return tp_dbt_client_tls(&tp_dbt_count_client, t);
}

static int blocks(void)
{
	return K.area != NULL;
}

/* The area after the control block, when tracepad made one; every offset checked. */
static int count_init(struct tp_dbt_client *cl)
{
	struct tp_agent_ctl *ctl = tp_dbt.ctl;
	uint64_t size, at;
	struct tp_dbt_counts *a;

	if (!ctl || tp_dbt.boot->ctl_size < ctl->size + sizeof(*a) || ctl->size & 4095)
		return 0;
	at = (uint64_t)(uintptr_t)ctl + ctl->size;
	size = tp_dbt.boot->ctl_size - ctl->size;
	a = (struct tp_dbt_counts *)(uintptr_t)at;
	if (a->magic != TP_DBT_COUNTS_MAGIC || !(a->flags & TP_DBT_CF_BLOCKS) || !a->max_slots ||
	    a->max_slots > MAX_SLOTS || a->max_insns > (1ull << 32) ||
	    a->slots_off + (uint64_t)a->max_slots * sizeof(struct tp_dbt_slot) > size ||
	    a->insns_off + a->max_insns * sizeof(struct tp_dbt_insn) > size ||
	    a->totals_off + (uint64_t)a->max_slots * 8 > size || a->slots_off < sizeof(*a) ||
	    a->insns_off < sizeof(*a) || a->totals_off < sizeof(*a))
		return 0;
	K.area = a;
	K.slots = (struct tp_dbt_slot *)(uintptr_t)(at + a->slots_off);
	K.insns = (struct tp_dbt_insn *)(uintptr_t)(at + a->insns_off);
	K.totals = (uint64_t *)(uintptr_t)(at + a->totals_off);
	K.max_slots = a->max_slots;
	K.max_insns = a->max_insns;
	K.nslots = 1; /* slot 0 takes what goes uncounted (a forked child's new blocks) */
	cl->tls_size = SLOTS_AT + (size_t)K.max_slots * 8;
	return 0;
}

static void put(struct tp_arch_writer *w, const uint8_t *tpl, const uint8_t *end)
{
	tp_arch_put_data(w, tpl, (size_t)(end - tpl));
}

/* Replace the placeholders in the last @n bytes written: the thread's fields and the
 * counter of @slot as %gs offsets, the client call's gate reason. */
static void patch(struct tp_arch_writer *w, size_t n, uint32_t slot)
{
	uint32_t base = (uint32_t)tp_dbt_count_client.tls_off, v;
	const uint32_t ph[][2] = {
	    {ON_PH, base + (uint32_t)offsetof(struct tls, on)},
	    {SLOT_PH, base + (uint32_t)SLOTS_AT + slot * 8},
	    {LIMIT_PH, base + (uint32_t)offsetof(struct tls, limit)},
	    {TARGET_PH, base + (uint32_t)offsetof(struct tls, target)},
	    {BELOW_PH, base + (uint32_t)offsetof(struct tls, below)},
	    {REASON_PH, TP_DBT_GATE_CLIENT | CALL_CHECK}, /* the counter is client 0 */
	};

	if (w->err || n > w->len)
		return;
	for (size_t i = w->len - n; i + 4 <= w->len; i++) {
		memcpy(&v, w->buf + i, 4);
		for (size_t k = 0; k < sizeof(ph) / sizeof(ph[0]); k++)
			if (v == ph[k][0])
				memcpy(w->buf + i, &ph[k][1], 4);
	}
}

/* Are the tables this process's?  A forked child has its own copy of the runtime, whose
 * slots would collide with its parent's in the shared area; a vfork child shares it. */
static int own_tables(void)
{
	return tp_raw0(SYS_getpid) == tp_dbt.pid || tp_dbt_self()->vfork_pending;
}

/* A new slot, or 0 (uncounted) in a forked child or once the tables are full. */
static uint32_t slot_new(void)
{
	if (!own_tables())
		return 0;
	if (K.nslots >= K.max_slots) {
		if (!K.area->full++)
			tp_dbt_fail("the dbt engine's block tables are full: later blocks are not "
				    "counted",
				    0);
		return 0;
	}
	return K.nslots++;
}

static uint32_t call_at(uint64_t pc)
{
	struct tp_agent_ctl *ctl = tp_dbt.ctl;

	if (K.area->flags & TP_DBT_CF_REGION) {
		if (pc == K.area->start_pc)
			return CALL_START;
		if (pc == K.area->stop_pc)
			return CALL_STOP;
	}
	if (K.area->flags & TP_DBT_CF_API) {
		/* written by the agent's constructor, before the program can call them */
		if (pc == __atomic_load_n(&ctl->step_begin_pc, __ATOMIC_ACQUIRE))
			return CALL_STEP_BEGIN;
		if (pc == __atomic_load_n(&ctl->step_end_pc, __ATOMIC_ACQUIRE))
			return CALL_STEP_END;
	}
	return 0;
}

static int count_block_at(uint64_t pc)
{
	return blocks() && (K.area->flags & (TP_DBT_CF_REGION | TP_DBT_CF_API)) && call_at(pc);
}

static void count_block_begin(uint64_t pc, struct tp_arch_writer *w)
{
	int from = tp_dbt_flags_dead_from(pc), dead = from == 0, reg;
	uint32_t call;

	K.pc = pc;
	K.ninsn = 0;
	K.idx = 0;
	K.defer = 0;
	if (!blocks()) {
		/* the count's cells in turn (rt-abi.h) */
		int32_t cell = TP_DBT_CELL_OFF(K.cell);

		K.cell = (K.cell + 1) % TP_DBT_NCELLS;
		if (from > 0) {
			/* one add a few instructions on rather than lea through rax here: a
			 * block left before it is not counted (one left after is, whole) */
			K.defer = from;
			K.defer_cell = cell;
		} else if (dead) {
			put(w, tp_dbt_tpl_count_add, tp_dbt_tpl_count_add_end);
			K.count_at = w->len - 4;
			if (!w->err)
				memcpy(w->buf + w->len - 8, &cell, 4);
		} else if ((reg = tp_dbt_dead_reg()) >= 0) {
			/* load (the cell's disp32 after 5 bytes), lea, store (its last 4) */
			const uint8_t *t = tp_dbt_tpl_count_regs + 32 * reg;
			size_t at = w->len, n = tp_dbt_tpl_count_regs_len[reg];

			put(w, t, t + n);
			K.count_at = at + n - 9 - 4;
			if (!w->err) {
				memcpy(w->buf + at + 5, &cell, 4);
				memcpy(w->buf + at + n - 4, &cell, 4);
			}
		} else {
			size_t at = w->len;

			put(w, tp_dbt_tpl_count, tp_dbt_tpl_count_end);
			K.count_at =
			    w->len - (size_t)(tp_dbt_tpl_count_end - tp_dbt_tpl_count_n) - 4;
			if (!w->err) {
				memcpy(w->buf + at + (tp_dbt_tpl_count_w - tp_dbt_tpl_count) - 4,
				       &cell, 4);
				memcpy(w->buf + at + (tp_dbt_tpl_count_n - tp_dbt_tpl_count) + 5,
				       &cell, 4);
			}
		}
		return;
	}
	/* a region's start or end: decided before the block's first instruction counts */
	call = call_at(pc);
	if (call)
		tp_dbt_client_put_call(w, &tp_dbt_count_client, (uint16_t)call);
	K.slot = slot_new();
	if (dead) {
		put(w, tp_dbt_tpl_bc_add, tp_dbt_tpl_bc_add_end);
		patch(w, (size_t)(tp_dbt_tpl_bc_add_end - tp_dbt_tpl_bc_add), K.slot);
	} else {
		put(w, tp_dbt_tpl_bc_lea, tp_dbt_tpl_bc_lea_end);
		patch(w, (size_t)(tp_dbt_tpl_bc_lea_end - tp_dbt_tpl_bc_lea), K.slot);
	}
}

static void count_insn(uint64_t pc, const uint8_t *b, const struct tp_insn *in,
		       struct tp_arch_writer *w, enum tp_dbt_client_where where)
{
	uint32_t slot;

	if (where == TP_DBT_CL_BEFORE && K.defer && K.idx++ == K.defer) {
		put(w, tp_dbt_tpl_count_add, tp_dbt_tpl_count_add_end);
		K.count_at = w->len - 4;
		if (!w->err)
			memcpy(w->buf + w->len - 8, &K.defer_cell, 4);
		K.defer = 0;
	}
	if (where == TP_DBT_CL_BRANCH) {
		/* where a --start region may return */
		if (blocks() && (K.area->flags & TP_DBT_CF_REGION)) {
			put(w, tp_dbt_tpl_rck, tp_dbt_tpl_rck_end);
			patch(w, (size_t)(tp_dbt_tpl_rck_end - tp_dbt_tpl_rck), 0);
		}
		return;
	}
	if (!(in->flags & TP_INSN_F_REP)) {
		/* counted with its block */
		if (where == TP_DBT_CL_BEFORE && K.ninsn < sizeof(K.buf) / sizeof(K.buf[0]))
			K.buf[K.ninsn++] = (struct tp_dbt_insn){pc, in->mnemonic, 0};
		return;
	}
	/* a rep string instruction: once per iteration, counted as it runs */
	if (where == TP_DBT_CL_BEFORE) {
		put(w, tp_dbt_tpl_rep_pre, tp_dbt_tpl_rep_post);
		return;
	}
	if (!blocks()) {
		put(w, tp_dbt_tpl_rep_post, tp_dbt_tpl_rep_end);
		return;
	}
	slot = slot_new();
	put(w, tp_dbt_tpl_brep_post, tp_dbt_tpl_brep_post_end);
	patch(w, (size_t)(tp_dbt_tpl_brep_post_end - tp_dbt_tpl_brep_post), slot);
	if (slot && K.ninsns < K.max_insns) {
		K.insns[K.ninsns] = (struct tp_dbt_insn){pc, in->mnemonic, 0};
		K.slots[slot] = (struct tp_dbt_slot){pc, (uint32_t)K.ninsns, 1, 1};
		K.ninsns++;
	}
}

static void count_block_end(uint64_t pc, uint64_t end, uint8_t *buf, size_t len)
{
	if (!blocks()) {
		if (K.defer) /* the block ended before (it cannot: flags_dead_from stops there) */
			tp_dbt_fail("a block's count was not placed, at", pc);
		memcpy(buf + K.count_at, &K.ninsn, 4);
		return;
	}
	if (!K.slot)
		return;
	if (K.ninsns + K.ninsn > K.max_insns) {
		if (!K.area->full++)
			tp_dbt_fail("the dbt engine's instruction tables are full: later blocks "
				    "are not in histograms",
				    0);
		K.slots[K.slot] = (struct tp_dbt_slot){pc, 0, (uint16_t)K.ninsn, 0};
	} else {
		memcpy(K.insns + K.ninsns, K.buf, K.ninsn * sizeof(K.buf[0]));
		K.slots[K.slot] =
		    (struct tp_dbt_slot){pc, (uint32_t)K.ninsns, (uint16_t)K.ninsn, 0};
		K.ninsns += K.ninsn;
	}
	K.area->ninsns = K.ninsns;
	__atomic_store_n(&K.area->nslots, K.nslots, __ATOMIC_RELEASE);
}

/* ---- regions ---- */

static void region_off(struct tls *d)
{
	d->on = 0;
	d->in_region = 0;
	d->limit = NOT_IN_REGION;
}

/* Inside a --start region, an indirect branch whose target sees the stack at or above the
 * region's entry rsp + 8 (its frame popped: a ret, longjmp, an exception) calls here: the
 * stack rises only through such branches, as the ptrace engine's test assumes. */
static uint64_t count_call(struct tp_dbt_thread *t, uint32_t arg, uint64_t back,
			   struct tp_dbt_frame *f)
{
	struct tls *d = tls(t);
	uint64_t sp = f->rsp, ret;

	switch (arg) {
	case CALL_START:
		/* each thread's first entry, unless it counts already */
		if (d->on || d->region_done || tp_rt_mem_read(sp, &ret, 8))
			break;
		d->on = d->in_region = d->region_done = 1;
		d->region_sp = sp;
		d->region_ret = ret;
		d->limit = sp + 8;
		break;
	case CALL_CHECK:
		if (d->in_region && tp_region_returned(d->target, sp, d->region_ret, d->region_sp))
			region_off(d);
		break;
	case CALL_STOP:
	case CALL_STEP_END:
		region_off(d);
		break;
	case CALL_STEP_BEGIN:
		d->on = 1; /* the agent's own code is taken out as the thread's counts fold */
		break;
	}
	return back;
}

/* ---- run time ---- */

static void count_thread_new(struct tp_dbt_thread *t, struct tp_dbt_thread *parent)
{
	struct tls *d;

	if (!blocks())
		return;
	d = tls(t);
	d->limit = NOT_IN_REGION;
	for (int i = 0x80; i < 256; i++)
		d->below[i] = 1;
	/* a thread made by a counted thread counts until it exits, as under the other
	 * engines; with no region, every thread counts */
	if (parent)
		tls(t)->on = tls(parent)->on;
	else
		tls(t)->on = !(K.area->flags & (TP_DBT_CF_REGION | TP_DBT_CF_API));
}

/* A vfork child runs on its parent's block: the parent's counters are kept aside meanwhile
 * and put back as the child execs or exits. */
static void count_vfork(struct tp_dbt_thread *t, int done)
{
	struct tls *d = tls(t);
	uint64_t old;

	if (!blocks())
		return;
	if (!done) {
		if (!d->saved) {
			long at =
			    tp_raw6(SYS_mmap, 0, (size_t)K.max_slots * 8, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

			if (tp_raw_failed(at))
				return;
			d->saved = (uint64_t *)(uintptr_t)at;
		}
		memcpy(d->saved, d->slot, (size_t)K.nslots * 8);
		d->saved[0] = K.nslots; /* slot 0 counts nothing: here it says how many */
		return;
	}
	old = d->saved ? d->saved[0] : 0;
	if (!old || old > K.nslots)
		return;
	/* slots the child made since are not the parent's either; the copy stays for a next
	 * execve the child tries (execvp) */
	memcpy(d->slot + 1, d->saved + 1, (size_t)(old - 1) * 8);
	memset(d->slot + old, 0, (size_t)(K.nslots - old) * 8);
}

/* The agent (preloaded for regions, as by the ptrace engine) is never counted: its text is
 * the module holding tracepad_step_begin, recorded in the control block. */
static int agent_text(uint64_t *lo, uint64_t *hi)
{
	struct tp_agent_ctl *ctl = tp_dbt.ctl;
	struct tp_agent_map *m = (void *)((char *)ctl + ctl->maps_off);
	uint64_t pc = ctl->step_begin_pc;
	uint32_t n = __atomic_load_n(&ctl->nmaps, __ATOMIC_ACQUIRE);

	if (!pc || ctl->maps_off + (uint64_t)ctl->max_maps * sizeof(*m) > ctl->size)
		return 0;
	for (uint32_t i = 0; i < n && i < ctl->max_maps; i++) {
		if (pc >= m[i].start && pc < m[i].end) {
			*lo = m[i].start;
			*hi = m[i].end;
			return 1;
		}
	}
	return 0;
}

/* The thread's counters, folded into its count and the slots' totals (tp_dbt_flush adds
 * the count to its slot in the control block next). */
static void count_flush(struct tp_dbt_thread *t)
{
	uint64_t *c, lo = 0, hi = 0;
	int agent;

	if (!blocks())
		return;
	c = tls(t)->slot;
	agent = agent_text(&lo, &hi);
	for (uint32_t id = 1; id < K.nslots; id++) {
		uint64_t v = c[id], n;
		const struct tp_dbt_slot *s = &K.slots[id];

		if (!v)
			continue;
		c[id] = 0;
		n = s->rep ? v : v * s->n;
		if (agent && s->pc >= lo && s->pc < hi) {
			__atomic_add_fetch(&K.area->excluded, n, __ATOMIC_RELAXED);
			continue;
		}
		t->count += n;
		__atomic_add_fetch(&K.totals[id], v, __ATOMIC_RELAXED);
	}
}

/* A handler that interrupted a slot's read-add-store added to the slot meanwhile: the
 * register that holds the read value is brought up to date before it is stored. */
static void count_signal(struct tp_dbt_thread *t, const siginfo_t *si, ucontext_t *uc)
{
	static const uint8_t ld_rcx[] = {0x65, 0x48, 0x8b, 0x0c, 0x25},
			     ld_rdx[] = {0x65, 0x48, 0x8b, 0x14, 0x25},
			     st_rcx[] = {0x65, 0x48, 0x89, 0x0c, 0x25},
			     st_rax[] = {0x65, 0x48, 0x89, 0x04, 0x25},
			     inc_rcx[] = {0x48, 0x8d, 0x49, 0x01},
			     add_rax[] = {0x48, 0x8d, 0x04, 0x10};
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP], *slot;
	greg_t *g = uc->uc_mcontext.gregs;
	const uint8_t *p = (const uint8_t *)(uintptr_t)pc;
	uint32_t disp;

	struct tls *d;
	int n = t->nsave;

	if (!blocks())
		return;
	/* a region's check in the handler must not lose the interrupted one's target */
	d = tls(t);
	if (si && n > 0 && n <= TP_DBT_SAVES)
		d->tsave[n - 1] = d->target;
	else if (!si && n >= 0 && n < TP_DBT_SAVES)
		d->target = d->tsave[n];
	if (si || !tp_dbt_in_runtime(pc - 9) || !tp_dbt_in_runtime(pc + 9))
		return;
	if (!memcmp(p, inc_rcx, 4) && !memcmp(p - 9, ld_rcx, 5)) {
		memcpy(&disp, p - 4, 4);
		slot = (uint64_t *)((char *)t + disp);
		g[REG_RCX] = (greg_t)*slot; /* before the +1 */
	} else if (!memcmp(p, st_rcx, 5) && !memcmp(p - 4, inc_rcx, 4)) {
		memcpy(&disp, p + 5, 4);
		slot = (uint64_t *)((char *)t + disp);
		g[REG_RCX] = (greg_t)(*slot + 1);
	} else if (!memcmp(p, add_rax, 4) && !memcmp(p - 9, ld_rdx, 5)) {
		memcpy(&disp, p - 4, 4);
		slot = (uint64_t *)((char *)t + disp);
		g[REG_RDX] = (greg_t)*slot;
	} else if (!memcmp(p, st_rax, 5) && !memcmp(p - 4, add_rax, 4)) {
		memcpy(&disp, p + 5, 4);
		slot = (uint64_t *)((char *)t + disp);
		g[REG_RAX] += (greg_t)(*slot - (uint64_t)g[REG_RDX]);
	}
}

/* Modules go to the control block's table, from which tracepad resolves histogram
 * addresses once the program is gone. */
static void count_module_load(uint64_t start, uint64_t end, uint64_t offset, const char *path,
			      size_t path_len)
{
	struct tp_agent_ctl *ctl = tp_dbt.ctl;
	struct tp_agent_map *m;
	uint32_t n;

	if (!ctl)
		return;
	m = (void *)((char *)ctl + ctl->maps_off);
	if (!blocks() || !own_tables() ||
	    ctl->maps_off + (uint64_t)ctl->max_maps * sizeof(*m) > ctl->size)
		return;
	n = ctl->nmaps;
	if (n >= ctl->max_maps)
		return;
	m += n;
	m->start = start;
	m->end = end;
	m->offset = offset;
	if (path_len >= TP_AGENT_PATH_MAX)
		path_len = TP_AGENT_PATH_MAX - 1;
	memcpy(m->path, path, path_len);
	m->path[path_len] = 0;
	__atomic_store_n(&ctl->nmaps, n + 1, __ATOMIC_RELEASE);
}

struct tp_dbt_client tp_dbt_count_client = {
    .name = "count",
    .init = count_init,
    .block_begin = count_block_begin,
    .insn = count_insn,
    .block_end = count_block_end,
    .block_at = count_block_at,
    .call = count_call,
    .thread_new = count_thread_new,
    .vfork = count_vfork,
    .flush = count_flush,
    .signal = count_signal,
    .module_load = count_module_load,
};
