/* Fast tracepoints in the agent: tracepad hands over a block (tracept-abi.h) with what to
 * place, then calls tracepad_ftp_install() with every other thread stopped, so that jump
 * pads may displace several instructions (TP_RT_PAD_STOPPED).  At each hit the pad's
 * callback evaluates the condition and the collect items with tracept's freestanding
 * evaluator, reads memory with rt's guarded copy, counts, and writes the frame into the
 * thread's ring; tracepad drains the rings and prints frames as for int3 tracepoints.
 * This whole file is built with -mgeneral-regs-only: the pads keep no vector state. */
#include <asm/prctl.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "agent/agent-priv.h"
#include "agent/ring.h"
#include "agent/tracept-abi.h"
#include "rt/pad.h"
#include "tracept/expr.h"

/* Hits of a thread between two looks for tracepad (a kill(0) system call): once it is gone
 * (killed without detaching) the pads stay but do nothing. */
#define HIT_POLL 0xffff
/* Bytes between the frame written and the lines fetched for writing: a few frames, about
 * the time of a line's trip from tracepad's core. */
#define PREFETCH_AHEAD 1024

int tracepad_ftp_attach(int tracer, int fd);
int tracepad_ftp_install(void);
long tracepad_ftp_detach(void);
extern int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
			     void *dso);

/* The tracepoints at one address: one pad calls them in order. */
struct site {
	uint32_t tps[TP_FTP_MAX_TPS];
	uint32_t n;
	struct tp_rt_pad *pad;
};

/* What a hit does with one collect item, worked out once at attach from its bytecode:
 * registers ($regs) are copied from the pad's record and memory at a fixed address (a
 * global) or at a register plus constants is read at once (interpreting them cost more
 * than the rest of a hit); the rest is evaluated. */
enum { P_EVAL, P_REG, P_CONST, P_MEM };
struct step {
	uint8_t kind; /* P_* */
	uint8_t reg;  /* P_REG, P_MEM: a word of struct tp_rt_regs, or NO_REG */
	uint8_t mem;  /* P_EVAL: the code computes an address */
	uint8_t pad;
	uint32_t size;		     /* P_MEM, P_EVAL: bytes read at the address */
	uint64_t val;		     /* P_CONST: the value; P_MEM: the address, or reg's offset */
	uint32_t code_off, code_len; /* P_EVAL */
};
#define NO_REG 0xff

/* A tracepoint's steps; copies of what check() validated, in the agent's own memory. */
struct plan {
	uint32_t rec_size, nitems;
	uint32_t cond_off, cond_len;
	int seg; /* an item or the condition reads $fs_base or $gs_base */
	struct step step[TP_FTP_MAX_ITEMS];
};

static struct {
	struct tp_ftp_ctl *ctl;
	uint64_t size;
	struct tp_ftp_tp *tps;
	struct tp_ftp_ring *rings;
	uint8_t *data;
	uint32_t gen; /* a session: threads claim their ring again */
	int on, forked, atfork;
	int prefetchw; /* the CPU has PREFETCHW (else it is a NOP or undefined) */
	struct site sites[TP_FTP_MAX_TPS];
	uint64_t addrs[TP_FTP_MAX_TPS];
	uint32_t nsites;
	struct plan plans[TP_FTP_MAX_TPS];
	struct tp_ag_rings rs;
} ftp;

struct tstate {
	uint32_t gen;
	uint32_t depth;
	struct tp_ag_writer w;
	uint32_t polls;
};
static __thread struct tstate fts __attribute__((tls_model("initial-exec")));

/* ---- a hit ---- */

static int rd(void *arg, uint64_t addr, void *buf, size_t len)
{
	return tp_rt_pad_read(arg, addr, buf, len);
}

static int eval(const uint64_t *u, const struct tp_rt_regs *r, uint32_t off, uint32_t len,
		uint64_t *v)
{
	return tp_expr_eval((const uint8_t *)ftp.ctl + off, len, u, rd, (void *)r, v, NULL);
}

/* struct tp_rt_regs as words */
#define RW(f) (uint8_t)(__builtin_offsetof(struct tp_rt_regs, f) / 8)

/* The registers as the evaluator takes them (struct user_regs_struct). */
static void uregs(const struct tp_rt_regs *r, uint64_t *u)
{
	for (int i = 0; i < TP_UREG_COUNT; i++)
		u[i] = 0;
	u[TP_UREG_RAX] = r->rax, u[TP_UREG_RBX] = r->rbx, u[TP_UREG_RCX] = r->rcx;
	u[TP_UREG_RDX] = r->rdx, u[TP_UREG_RSI] = r->rsi, u[TP_UREG_RDI] = r->rdi;
	u[TP_UREG_RBP] = r->rbp, u[TP_UREG_RSP] = r->rsp, u[TP_UREG_R8] = r->r8;
	u[TP_UREG_R9] = r->r9, u[TP_UREG_R10] = r->r10, u[TP_UREG_R11] = r->r11;
	u[TP_UREG_R12] = r->r12, u[TP_UREG_R13] = r->r13, u[TP_UREG_R14] = r->r14;
	u[TP_UREG_R15] = r->r15, u[TP_UREG_RIP] = r->rip, u[TP_UREG_EFLAGS] = r->rflags;
	u[TP_UREG_ORIG_RAX] = ~0ull;
	u[TP_UREG_CS] = 0x33, u[TP_UREG_SS] = 0x2b;
}

/* Register @k of the evaluator as a step: a word of the record, or a constant (uregs). */
static void ureg_step(uint8_t k, struct step *st)
{
	static const uint8_t word[TP_UREG_COUNT] = {
	    [TP_UREG_R15] = RW(r15), [TP_UREG_R14] = RW(r14),	    [TP_UREG_R13] = RW(r13),
	    [TP_UREG_R12] = RW(r12), [TP_UREG_RBP] = RW(rbp),	    [TP_UREG_RBX] = RW(rbx),
	    [TP_UREG_R11] = RW(r11), [TP_UREG_R10] = RW(r10),	    [TP_UREG_R9] = RW(r9),
	    [TP_UREG_R8] = RW(r8),   [TP_UREG_RAX] = RW(rax),	    [TP_UREG_RCX] = RW(rcx),
	    [TP_UREG_RDX] = RW(rdx), [TP_UREG_RSI] = RW(rsi),	    [TP_UREG_RDI] = RW(rdi),
	    [TP_UREG_RIP] = RW(rip), [TP_UREG_EFLAGS] = RW(rflags), [TP_UREG_RSP] = RW(rsp)};

	if (k == TP_UREG_RAX || word[k]) {
		st->reg = word[k];
		return;
	}
	/* uregs' constants */
	st->reg = NO_REG;
	st->val = k == TP_UREG_ORIG_RAX ? ~0ull
		  : k == TP_UREG_CS	? 0x33
		  : k == TP_UREG_SS	? 0x2b
					: 0;
}

/* The step of item @it (its bytecode @c, inside the block): a register, a constant, or the
 * memory at a constant or at a register plus constants (globals, locals on the stack) is
 * copied; anything else is evaluated (the segment bases too: need_u reads them). */
static void plan_item(const struct tp_ftp_item *it, const uint8_t *c, struct step *st)
{
	struct step x = {.reg = NO_REG};
	uint32_t n = it->code_len, pc, adds = 0;

	*st = (struct step){.kind = P_EVAL,
			    .mem = !!it->mem,
			    .size = it->size,
			    .code_off = it->code_off,
			    .code_len = it->code_len};
	if (n >= 2 && c[0] == TP_OP_REG && c[1] < TP_UREG_COUNT && c[1] != TP_UREG_FS_BASE &&
	    c[1] != TP_UREG_GS_BASE) {
		ureg_step(c[1], &x);
		pc = 2;
	} else if (n >= 9 && c[0] == TP_OP_CONST) {
		__builtin_memcpy(&x.val, c + 1, 8);
		pc = 9;
	} else {
		return;
	}
	for (; n - pc >= 10 && c[pc] == TP_OP_CONST &&
	       (c[pc + 9] == TP_OP_ADD || c[pc + 9] == TP_OP_SUB);
	     pc += 10, adds++) {
		uint64_t a;

		__builtin_memcpy(&a, c + pc + 1, 8);
		x.val += c[pc + 9] == TP_OP_ADD ? a : -a;
	}
	if (pc + 1 != n || c[pc] != TP_OP_END)
		return;
	if (it->mem) {
		st->kind = P_MEM;
		st->reg = x.reg;
		st->val = x.val;
	} else if (x.reg == NO_REG) {
		st->kind = P_CONST;
		st->val = x.val;
	} else if (!adds) {
		st->kind = P_REG;
		st->reg = x.reg;
	}
}

static int tracer_gone(void)
{
	int t = ftp.ctl->tracer_pid;

	if (t <= 0 || tp_raw2(SYS_kill, t, 0) != -ESRCH)
		return 0;
	__atomic_store_n(&ftp.on, 0, __ATOMIC_RELEASE);
	return 1;
}

/* Count @c (TP_FTP_COUNTS' order) of tracepoint @k: in the thread's ring with one add that
 * a signal handler of the same thread cannot split, else in the shared count. */
static void bump(struct tp_ftp_ring *own, uint32_t k, int c)
{
	if (own)
		__asm__("addq $1, %0" : "+m"(own->counts[k][c]));
	else
		__atomic_fetch_add(&ftp.tps[k].hits + c, 1, __ATOMIC_RELAXED);
}

/* The evaluator's registers, filled at the first need of a hit. */
struct uregs {
	int have, have_seg;
	uint64_t u[TP_UREG_COUNT];
};

/* The segment bases are not in the pad's record and this machine may lack rdfsbase
 * (CR4.FSGSBASE): a system call each, made only for the tracepoints that read them. */
static const uint64_t *need_u(struct uregs *x, const struct tp_rt_regs *r, const struct plan *pl)
{
	if (!x->have) {
		uregs(r, x->u);
		x->have = 1;
	}
	if (pl->seg && !x->have_seg) {
		tp_raw2(SYS_arch_prctl, ARCH_GET_FS, (long)&x->u[TP_UREG_FS_BASE]);
		tp_raw2(SYS_arch_prctl, ARCH_GET_GS, (long)&x->u[TP_UREG_GS_BASE]);
		x->have_seg = 1;
	}
	return x->u;
}

/* Collect tracepoint @k's items into a frame record, following its plan. */
static void collect(struct tstate *t, uint32_t k, const struct tp_rt_regs *r, struct uregs *x)
{
	const struct plan *pl = &ftp.plans[k];
	const uint64_t *w = (const uint64_t *)r;
	struct tp_ftp_ring *ring = NULL;
	uint8_t *rec = tp_ag_ring_reserve(&ftp.rs, &t->w, pl->rec_size, &ring), *mem;
	struct tp_ftp_rec *h = (struct tp_ftp_rec *)rec;
	uint64_t *val, unavail = 0;

	if (!rec) {
		__atomic_fetch_add(&ftp.tps[k].lost, 1, __ATOMIC_RELAXED);
		return;
	}
	val = (uint64_t *)(rec + sizeof(*h));
	mem = (uint8_t *)(val + pl->nitems);
	for (uint32_t i = 0; i < pl->nitems; i++) {
		const struct step *st = &pl->step[i];
		uint64_t v = 0;

		switch (st->kind) {
		case P_REG:
			val[i] = w[st->reg];
			continue;
		case P_CONST:
			val[i] = st->val;
			continue;
		case P_MEM:
			val[i] = 0;
			v = st->val + (st->reg == NO_REG ? 0 : w[st->reg]);
			if (tp_rt_pad_read(r, v, mem, st->size))
				unavail |= 1ull << i;
			mem += st->size;
			continue;
		}
		if (eval(need_u(x, r, pl), r, st->code_off, st->code_len, &v)) {
			unavail |= 1ull << i;
			val[i] = 0;
		} else if (!st->mem) {
			val[i] = v;
		} else {
			val[i] = 0;
			if (tp_rt_pad_read(r, v, mem, st->size))
				unavail |= 1ull << i;
		}
		if (st->mem)
			mem += st->size;
	}
	h->size = pl->rec_size;
	h->tp = (uint16_t)k;
	h->pad = 0;
	h->tid = t->w.tid;
	h->pad2 = 0;
	h->unavail = unavail;
	__atomic_store_n(&ring->head, ring->head + pl->rec_size, __ATOMIC_RELEASE);
	/* the lines of a frame a few ahead, fetched for writing while the program runs on:
	 * tracepad read them last, on another core (prefetcht0 would fetch them shared) */
	for (uint32_t off = 0; off < pl->rec_size && off < 512; off += 64) {
		rec = ftp.data + (uint64_t)t->w.ring * ftp.ctl->ring_size +
		      ((ring->head + PREFETCH_AHEAD + off) & (ftp.ctl->ring_size - 1));
		if (ftp.prefetchw)
			__asm__ volatile("prefetchw %0" ::"m"(*rec));
		else
			__builtin_prefetch(rec, 1, 3);
	}
}

/* Claim one of the pass count's collections: 0 once they are used up. */
static int take_pass(struct tp_ftp_tp *tp)
{
	uint64_t c = __atomic_load_n(&tp->collected, __ATOMIC_RELAXED);

	do {
		if (c >= tp->pass_count)
			return 0;
	} while (!__atomic_compare_exchange_n(&tp->collected, &c, c + 1, 1, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return 1;
}

static void hit(const struct tp_rt_regs *r, void *ctx)
{
	struct site *s = ctx;
	struct tstate *t = &fts;
	struct tp_ftp_ring *own;
	struct uregs x;

	if (!__atomic_load_n(&ftp.on, __ATOMIC_ACQUIRE) || ftp.forked)
		return;
	if (t->gen != ftp.gen) {
		t->gen = ftp.gen;
		t->w = (struct tp_ag_writer){-1, 0, 0};
		t->depth = 0;
		t->polls = 0;
	}
	if (!(++t->polls & HIT_POLL) && tracer_gone())
		return;
	x.have = x.have_seg = 0;
	t->depth++;
	own = tp_ag_ring_own(&ftp.rs, &t->w);
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t k = s->tps[i];
		struct tp_ftp_tp *tp = &ftp.tps[k];
		const struct plan *pl = &ftp.plans[k];
		uint64_t v = 1;

		bump(own, k, 0);
		/* a signal handler that hit a tracepoint while this thread was writing a frame:
		 * counted, not collected (the ring has one writer at a time) */
		if (t->depth > 1) {
			__atomic_fetch_add(&ftp.ctl->nested, 1, __ATOMIC_RELAXED);
			bump(own, k, 2);
			continue;
		}
		if (tp->pass_count &&
		    __atomic_load_n(&tp->collected, __ATOMIC_RELAXED) >= tp->pass_count) {
			bump(own, k, 2);
			continue;
		}
		if (pl->cond_len && eval(need_u(&x, r, pl), r, pl->cond_off, pl->cond_len, &v)) {
			bump(own, k, 3);
			v = 0;
		}
		/* under a pass count, collections are claimed in the shared count */
		if (!v || (tp->pass_count && !take_pass(tp))) {
			bump(own, k, 2);
			continue;
		}
		if (!tp->pass_count)
			bump(own, k, 1);
		collect(t, k, r, &x);
	}
	t->depth--;
}

/* ---- sessions ---- */

static void in_child(void)
{
	/* the pads stay in a forked child's copy of the code: they do nothing there */
	ftp.forked = 1;
	if (ftp.ctl)
		__atomic_or_fetch(&ftp.ctl->state, TP_FTP_ST_FORKED, __ATOMIC_RELAXED);
}

static void unmap(void)
{
	tp_raw2(SYS_munmap, ftp.ctl, (long)ftp.size);
	ftp.ctl = NULL;
}

/* Is [@off, @off + @len) inside the block? */
static int inside(uint64_t off, uint64_t len)
{
	return off >= sizeof(struct tp_ftp_ctl) && off + len >= off && off + len <= ftp.size;
}

static int reads_seg(const uint8_t *code, uint32_t len)
{
	return tp_expr_reads_reg(code, len, TP_UREG_FS_BASE) ||
	       tp_expr_reads_reg(code, len, TP_UREG_GS_BASE);
}

static int check(void)
{
	struct tp_ftp_ctl *c = ftp.ctl;

	if (c->ntps > TP_FTP_MAX_TPS || !c->nrings || c->ring_size < 4096 ||
	    (c->ring_size & (c->ring_size - 1)) ||
	    !inside(c->tps_off, (uint64_t)c->ntps * sizeof(struct tp_ftp_tp)) ||
	    !inside(c->rings_off, (uint64_t)c->nrings * sizeof(struct tp_ftp_ring)) ||
	    !inside(c->data_off, (uint64_t)c->nrings * c->ring_size) || (c->data_off & 7))
		return -1;
	ftp.tps = (struct tp_ftp_tp *)((uint8_t *)c + c->tps_off);
	ftp.rings = (struct tp_ftp_ring *)((uint8_t *)c + c->rings_off);
	ftp.data = (uint8_t *)c + c->data_off;
	ftp.rs = (struct tp_ag_rings){ftp.rings, ftp.data, c->nrings, c->ring_size, 0, tracer_gone};
	for (uint32_t i = 0; i < c->ntps; i++) {
		struct tp_ftp_tp *tp = &ftp.tps[i];
		struct plan *pl = &ftp.plans[i];
		const struct tp_ftp_item *it;
		uint64_t need = sizeof(struct tp_ftp_rec) + 8ull * tp->nitems;

		if (tp->nitems > TP_FTP_MAX_ITEMS ||
		    !inside(tp->items_off, (uint64_t)tp->nitems * sizeof(*it)) ||
		    (tp->cond_len && !inside(tp->cond_off, tp->cond_len)))
			return -1;
		it = (const void *)((uint8_t *)c + tp->items_off);
		pl->seg = 0;
		for (uint32_t k = 0; k < tp->nitems; k++) {
			if (!inside(it[k].code_off, it[k].code_len) || it[k].size > (1u << 20))
				return -1;
			need += it[k].mem ? it[k].size : 0;
			plan_item(&it[k], (uint8_t *)c + it[k].code_off, &pl->step[k]);
			pl->seg |= reads_seg((uint8_t *)c + it[k].code_off, it[k].code_len);
		}
		if (tp->cond_len)
			pl->seg |= reads_seg((uint8_t *)c + tp->cond_off, tp->cond_len);
		if (tp->rec_size < need || (tp->rec_size & 7) || tp->rec_size > c->ring_size / 2)
			return -1;
		pl->rec_size = tp->rec_size;
		pl->nitems = tp->nitems;
		pl->cond_off = tp->cond_off;
		pl->cond_len = tp->cond_len;
	}
	return 0;
}

/* Take tracepad's block (its fd @fd, opened through /proc/@tracer/fd) and get ready: the
 * fault guard of the reads, the SIGTRAP dispatcher for the int3 path.  Other threads may
 * run.  0, -1 (no block), -2 (refused: ctl->error), -3 (a session is under way). */
__attribute__((visibility("default"))) int tracepad_ftp_attach(int tracer, int fd)
{
	unsigned a, b, d, e;
	struct tp_ftp_ctl *c;
	long p, n;

	/* the block of a tracepad killed without detaching goes once no thread uses it */
	if (ftp.ctl && (!tracer_gone() || tracepad_ftp_detach()))
		return -3;
	p = tp_agent_map_block(tracer, fd, "/memfd:tracepad-ftp", TP_FTP_MAGIC, TP_FTP_ABI,
			       &ftp.size);
	if (p == -1)
		return -1;
	ftp.ctl = (struct tp_ftp_ctl *)p;
	if (check()) {
		unmap();
		return -2;
	}
	c = ftp.ctl;
	c->pid = (int32_t)tp_raw0(SYS_getpid);
	ftp.rs.pid = c->pid;
	c->install_pc = (uint64_t)(uintptr_t)&tracepad_ftp_install;
	c->detach_pc = (uint64_t)(uintptr_t)&tracepad_ftp_detach;
	if (!ftp.atfork && __register_atfork(NULL, NULL, in_child, &ftp) == 0)
		ftp.atfork = 1;
	if (tp_zydis_load() || tp_rt_mem_guard_install() || tp_rt_trap_chain()) {
		const char *m = "cannot load libZydis, or install the fault guard or the SIGTRAP "
				"handler";

		for (n = 0; m[n] && n < (long)sizeof(c->error) - 1; n++)
			c->error[n] = m[n];
		c->error[n] = 0;
		tp_rt_mem_guard_remove();
		unmap();
		return -2;
	}
	ftp.forked = 0;
	/* CPUID.80000001H:ECX.PRFCHW */
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(d), "=d"(e) : "a"(0x80000001u), "c"(0));
	ftp.prefetchw = (d >> 8) & 1;
	ftp.nsites = 0;
	__atomic_add_fetch(&ftp.gen, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* Place every tracepoint, the other threads stopped by tracepad (which then moves any whose
 * pc lies on an inner boundary of a jmp site: ioff/icopy).  Returns how many failed (their
 * err says why); the others are live. */
__attribute__((visibility("default"))) int tracepad_ftp_install(void)
{
	struct tp_ftp_ctl *c = ftp.ctl;
	int bad = 0;

	if (!c)
		return -1;
	for (uint32_t i = 0; i < c->ntps; i++) {
		struct tp_ftp_tp *tp = &ftp.tps[i];
		struct site *s = NULL;

		for (uint32_t k = 0; k < ftp.nsites && !s; k++)
			if (ftp.tps[ftp.sites[k].tps[0]].addr == tp->addr)
				s = &ftp.sites[k];
		if (!s) {
			s = &ftp.sites[ftp.nsites++];
			s->n = 0;
			s->pad = NULL;
		}
		s->tps[s->n++] = i;
	}
	__atomic_store_n(&ftp.on, 1, __ATOMIC_RELEASE);
	__atomic_or_fetch(&c->state, TP_FTP_ST_ACTIVE, __ATOMIC_RELEASE);
	/* another tracepoint's address is a target too: no jmp may cover it */
	for (uint32_t k = 0; k < ftp.nsites; k++)
		ftp.addrs[k] = ftp.tps[ftp.sites[k].tps[0]].addr;
	for (uint32_t k = 0; k < ftp.nsites; k++) {
		struct site *s = &ftp.sites[k];
		struct tp_ftp_tp *tp = &ftp.tps[s->tps[0]];
		struct tp_rt_pad_where w = {tp->fn_lo, tp->fn_hi, 0, ftp.addrs, ftp.nsites};
		int err = tp_rt_pad_install(tp->addr, hit, s, TP_RT_PAD_STOPPED, &w, &s->pad);

		for (uint32_t j = 0; j < s->n; j++) {
			struct tp_ftp_tp *x = &ftp.tps[s->tps[j]];

			x->err = err;
			if (err)
				continue;
			x->kind = tp_rt_pad_kind(s->pad);
			x->why = tp_rt_pad_why(s->pad);
			x->covered = (uint32_t)tp_rt_pad_covered(s->pad);
			x->ninsn =
			    (uint32_t)tp_rt_pad_layout(s->pad, x->ioff, x->icopy, TP_FTP_MAX_INSNS);
		}
		if (err) {
			s->pad = NULL;
			bad++;
		}
	}
	return bad;
}

/* End the session, the other threads stopped: every byte back (at the first call), then the
 * number of threads still inside a callback (tracepad lets them run and calls again), or 0
 * once the block is unmapped and the fault guard gone.  The SIGTRAP dispatcher stays: a
 * late trap of a removed int3 site is still taken (pad.c). */
__attribute__((visibility("default"))) long tracepad_ftp_detach(void)
{
	long busy = 0;

	if (!ftp.ctl)
		return 0;
	__atomic_store_n(&ftp.on, 0, __ATOMIC_SEQ_CST);
	for (uint32_t k = 0; k < ftp.nsites; k++) {
		struct site *s = &ftp.sites[k];

		/* bytes that are not the pad's any more (an object unloaded and its place
		 * reused) are left as they are: tracepad compares what it can read */
		if (s->pad)
			tp_rt_pad_unlink(s->pad);
		if (s->pad)
			busy += (long)tp_rt_pad_busy(s->pad);
	}
	if (busy)
		return busy;
	ftp.nsites = 0;
	tp_rt_mem_guard_remove();
	unmap();
	return 0;
}
