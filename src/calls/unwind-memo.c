/* Backtraces of the agent engine's calls remembered: the same walk seen again (the same pc,
 * stack pointer and caller, the same stack words where it found its frames) gives the frames
 * it gave, without libdw, whose walk of a frame costs hundreds of ns and mallocs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "calls/unwind.h"

#define MEMO_SLOTS 1024 /* direct-mapped by pc, stack pointer and caller */
#define MEMO_READS 128	/* words a remembered walk read at most */
#define MEMO_PCS 64

enum { ENT_EMPTY, ENT_SEEN, ENT_FULL, ENT_REGS };

/* A walk: ENT_SEEN its key only (seen once), ENT_FULL the words that decide it and its
 * frames, ENT_REGS one whose frames depend on registers besides rip, rsp and rbp (never
 * remembered). */
struct memo_ent {
	const struct tp_unwinder *u;
	uint64_t rip, sp, caller, rbp;
	unsigned gen;
	bool by_rbp; /* rbp decides the walk too (frame pointers): part of the key */
	uint8_t state, n, max, nreads;
	uint64_t addr[MEMO_READS], val[MEMO_READS];
	uint64_t pcs[MEMO_PCS];
};

/* The words a walk read, in order, through the caller's @word; a check's walk hands libdw
 * the words flagged in @flip changed (what it records is what @word gave). */
struct trace {
	tp_unwind_subst_fn word;
	void *arg;
	unsigned n;
	bool over; /* too many, or one @word did not serve: not to be remembered */
	const bool *flip;
	uint64_t addr[MEMO_READS], val[MEMO_READS];
};

struct tp_unwind_memo {
	struct memo_ent ent[MEMO_SLOTS];
	struct trace check; /* decides()'s walk */
	bool flip[MEMO_READS];
};

struct tp_unwind_memo *tp_unwind_memo_new(void)
{
	return calloc(1, sizeof(struct tp_unwind_memo));
}

void tp_unwind_memo_free(struct tp_unwind_memo *m)
{
	free(m);
}

static uint64_t garble(unsigned i)
{
	return tp_hash_mix(0x9e3779b97f4a7c15ull * (i + 1)) | 1;
}

static bool traced_word(void *arg, pid_t tid, uint64_t addr, uint64_t *val)
{
	struct trace *t = arg;

	if (!t->word(t->arg, tid, addr, val)) {
		t->over = true;
		return false;
	}
	if (t->n == MEMO_READS) {
		t->over = true;
		return true;
	}
	t->addr[t->n] = addr;
	t->val[t->n] = *val;
	if (t->flip && t->flip[t->n])
		*val ^= garble(t->n + 32);
	t->n++;
	return true;
}

static int walk(struct tp_unwinder *u, pid_t tid, const struct user_regs_struct *regs,
		struct trace *t, uint64_t *pcs, int max)
{
	t->n = 0;
	t->over = false;
	return tp_unwinder_backtrace(u, tid, regs, traced_word, t, pcs, max);
}

/* Does @e's walk find the same words now? */
static bool same_words(const struct memo_ent *e, pid_t tid, tp_unwind_subst_fn word, void *arg)
{
	for (unsigned i = 0; i < e->nreads; i++) {
		uint64_t v;

		if (!word(arg, tid, e->addr[i], &v) || v != e->val[i])
			return false;
	}
	return true;
}

/* The walk again with every register but rip and rsp (and rbp if @keep_rbp) changed, and the
 * words read flagged in m->flip: if it reads at the same addresses and gives the same frames,
 * what was changed played no part (the CFA rules on rsp only, registers saved in the stack
 * that no rule uses), and rip, rsp and the other words decide the walk. */
static bool decides(struct tp_unwind_memo *m, struct tp_unwinder *u, pid_t tid,
		    const struct user_regs_struct *regs, const struct trace *t1,
		    const uint64_t *pcs, int n, int max, bool keep_rbp)
{
	struct user_regs_struct r = *regs;
	uint64_t pcs2[MEMO_PCS];
	struct trace *t2 = &m->check;
	unsigned long long *v[] = {&r.rax, &r.rdx, &r.rcx, &r.rbx, &r.rsi, &r.rdi, &r.rbp, &r.r8,
				   &r.r9,  &r.r10, &r.r11, &r.r12, &r.r13, &r.r14, &r.r15};

	for (unsigned i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (!keep_rbp || v[i] != &r.rbp)
			*v[i] ^= garble(i);
	t2->word = t1->word;
	t2->arg = t1->arg;
	t2->flip = m->flip;
	return walk(u, tid, &r, t2, pcs2, max) == n && !t2->over && t2->n == t1->n &&
	       !memcmp(t2->addr, t1->addr, t1->n * sizeof(t1->addr[0])) &&
	       !memcmp(pcs2, pcs, (size_t)n * sizeof(*pcs));
}

/* Which of @t's words and registers decide the walk, tried from the fewest: the words that
 * are return addresses found (or 0), or every word; without rbp, or with it.  Into @e, or
 * false. */
static bool remember(struct tp_unwind_memo *m, struct memo_ent *e, struct tp_unwinder *u, pid_t tid,
		     const struct user_regs_struct *regs, const struct trace *t,
		     const uint64_t *pcs, int n, int max)
{
	for (int k = 0; k < 4; k++) {
		bool keep_rbp = k & 1, all_words = k & 2;

		for (unsigned i = 0; i < t->n; i++) {
			bool ra = false;

			for (int j = 1; j < n && !ra; j++)
				ra = t->val[i] == pcs[j];
			/* a 0 read ends a walk (outside the stack copy): kept too */
			m->flip[i] = !all_words && !ra && t->val[i];
		}
		if (!decides(m, u, tid, regs, t, pcs, n, max, keep_rbp))
			continue;
		e->by_rbp = keep_rbp;
		e->rbp = regs->rbp;
		e->nreads = 0;
		for (unsigned i = 0; i < t->n; i++)
			if (!m->flip[i]) {
				e->addr[e->nreads] = t->addr[i];
				e->val[e->nreads++] = t->val[i];
			}
		e->n = (uint8_t)n;
		memcpy(e->pcs, pcs, (size_t)n * sizeof(*pcs));
		e->state = ENT_FULL;
		return true;
	}
	return false;
}

int tp_unwind_memo_backtrace(struct tp_unwind_memo *m, struct tp_unwinder *u, pid_t tid,
			     const struct user_regs_struct *regs, tp_unwind_subst_fn word,
			     void *arg, uint64_t *pcs, int max)
{
	uint64_t caller = 0;
	struct memo_ent *e;
	struct trace t = {.word = word, .arg = arg};
	bool known;
	int n;

	if (!m || max < 1 || max > MEMO_PCS || !word(arg, tid, regs->rsp, &caller))
		return tp_unwinder_backtrace(u, tid, regs, word, arg, pcs, max);
	e = &m->ent[tp_hash_mix(regs->rip ^ tp_hash_mix(regs->rsp ^ tp_hash_mix(caller))) %
		    MEMO_SLOTS];
	known = e->state != ENT_EMPTY && e->u == u && e->gen == tp_unwinder_gen(u) &&
		e->rip == regs->rip && e->sp == regs->rsp && e->caller == caller && e->max == max &&
		(!e->by_rbp || e->rbp == regs->rbp);
	if (known && e->state == ENT_FULL && same_words(e, tid, word, arg)) {
		memcpy(pcs, e->pcs, e->n * sizeof(*pcs));
		return e->n;
	}
	n = walk(u, tid, regs, &t, pcs, max);
	if (n < 1 || t.over || (known && e->state == ENT_REGS))
		return n;
	/* seen once: a walk remembered costs more walks, for walks that come back */
	if (!known) {
		*e = (struct memo_ent){.u = u,
				       .gen = tp_unwinder_gen(u),
				       .rip = regs->rip,
				       .sp = regs->rsp,
				       .caller = caller,
				       .max = (uint8_t)max,
				       .state = ENT_SEEN};
		return n;
	}
	if (!remember(m, e, u, tid, regs, &t, pcs, n, max))
		e->state = ENT_REGS;
	return n;
}
