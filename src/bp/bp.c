/* Software breakpoints for the ptrace engine (after Functracer and kprobes' instruction
 * pages): the int3 stays in the text, the displaced instruction runs from an SSOL slot
 * followed by a jmp back, so a hit is one stop (pc := slot).  This file: the table. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bp/bp-priv.h"
#include "proc/inject.h"

struct tp_bps *tp_bps_new(struct tp_proc *p, pid_t pid)
{
	struct tp_bps *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->p = p;
	b->pid = pid;
	return b;
}

void tp_bps_free(struct tp_bps *bps)
{
	if (!bps)
		return;
	free(bps->pool);
	tp_hash_release(&bps->index);
	free(bps->areas);
	free(bps->q);
	for (unsigned i = 0; i < bps->nsh; i++)
		free(bps->sh[i].f);
	free(bps->sh);
	free(bps->afree);
	free(bps->aquar);
	free(bps->aheld);
	free(bps->rbuf);
	free(bps);
}

int tp_bp_wait(struct tp_bps *bps, struct tp_event *ev)
{
	return tp_proc_wait(bps->p, ev);
}

int tp_bp_inject_syscall(struct tp_bps *bps, pid_t tid, long nr, const uint64_t args[6],
			 int64_t *ret)
{
	return tp_proc_inject_syscall(bps->p, bps->pid, tid, nr, args, ret);
}

/* A new breakpoint record at @addr (not in the table), zeroed but for its address; records
 * move when the pool grows: pointers to them last until the next add. */
struct bp *tp_bp_add(struct tp_bps *b, uint64_t addr)
{
	if (b->npool == b->cap) {
		unsigned ncap = b->cap ? 2 * b->cap : 64;
		struct bp *n = realloc(b->pool, ncap * sizeof(*n));

		if (!n)
			return NULL;
		b->pool = n;
		b->cap = ncap;
	}
	if (tp_hash_put(&b->index, addr, b->npool))
		return NULL;
	b->pool[b->npool] = (struct bp){.addr = addr};
	return &b->pool[b->npool++];
}

int tp_bp_insert(struct tp_bps *bps, pid_t tid, uint64_t addr, unsigned flags)
{
	uint8_t buf[SITE_SCAN], slot[SLOT_SIZE];
	struct tp_insn insn;
	struct area *a;
	struct bp *bp;
	size_t rlen;
	ssize_t got;
	uint64_t at;
	bool site_ret;
	int r;

	if (!addr)
		return -EINVAL;
	bp = tp_bp_find(bps, addr);
	if (bp && bp->entry)
		return -EEXIST;
	if ((flags & TP_BP_RETURN) && !bps->tramp) {
		r = tp_bp_make_tramp(bps, tid, addr);
		if (r)
			return r;
	}
	/* A function that reads its return slot is looked at beyond its first instruction. */
	got = tp_proc_read(bps->pid, addr, buf,
			   (flags & TP_BP_RETURN) && !(flags & TP_BP_RETURN_SITE)
			       ? sizeof(buf)
			       : TP_ARCH_MAX_INSN_LEN);
	if (got <= 0)
		return got < 0 ? (int)got : -EFAULT;
	site_ret = (flags & TP_BP_RETURN) &&
		   ((flags & TP_BP_RETURN_SITE) || tp_arch_reads_return_slot(buf, got, addr));
	if (site_ret && !(flags & TP_BP_RETURN_SITE))
		tp_dbg("bp: 0x%llx reads its return address: its returns are caught where they go",
		       (unsigned long long)addr);
	if (bp) {
		/* A return site planted earlier becomes a function's entry too. */
		bp->entry = true;
		bp->ret = flags & TP_BP_RETURN;
		bp->site_ret = site_ret;
		return 0;
	}
	r = tp_arch_decode(buf, got, addr, &insn);
	if (r)
		return r;
	/* Instructions that would need emulation (syscall, int3, ...): tp_arch_relocate
	 * refuses them; none is found at a function entry, so they are refused here too
	 * rather than falling back to stop-the-world stepping. */
	a = tp_bp_area_for(bps, tid, addr, &r);
	if (!a)
		return r;
	at = a->base + (uint64_t)a->used * SLOT_SIZE;
	r = tp_arch_relocate(buf, insn.len, addr, at, slot, sizeof(slot) - JMP_LEN, &rlen);
	if (r)
		return r;
	if (insn.kind != TP_INSN_JMP && insn.kind != TP_INSN_RET) {
		r = tp_arch_emit_jmp(slot + rlen, at + rlen, addr + insn.len);
		if (r)
			return r;
		r = tp_proc_write(bps->pid, at, slot, rlen + JMP_LEN);
	} else {
		r = tp_proc_write(bps->pid, at, slot, rlen);
	}
	if (r)
		return r;
	bp = tp_bp_add(bps, addr);
	if (!bp)
		return -ENOMEM;
	a->used++;
	bp->slot = at;
	bp->ret = flags & TP_BP_RETURN;
	bp->site_ret = site_ret;
	bp->entry = true;
	bp->len = insn.len;
	bp->slot_len = rlen;
	memcpy(bp->orig, buf, insn.len);
	/* The slot is complete before the int3 appears: a thread that hits it finds it ready. */
	r = tp_proc_poke_int3(bps->pid, addr, true, 0);
	/* On failure the entry stays: its original byte is still in place, and
	 * tp_bp_remove_all() writing it back is harmless. */
	return r;
}

bool tp_bp_owns_trap(struct tp_bps *bps, uint64_t pc)
{
	struct bp *bp;

	if (bps->tramp && pc - 1 == bps->tramp)
		return true;
	/* Past a 1-byte instruction, addr + 1 is also where its slot jumps back to. */
	bp = tp_bp_find(bps, pc - 1);
	return bp && bp->len > 1;
}

int tp_bp_forget(struct tp_bps *bps, uint64_t lo, uint64_t hi)
{
	struct tp_hash index = {0};
	unsigned n = 0, kept = 0;

	for (unsigned i = 0; i < bps->npool; i++)
		n += bps->pool[i].addr >= lo && bps->pool[i].addr < hi;
	if (!n)
		return 0;
	/* The new index first: out of memory, nothing is forgotten. */
	for (unsigned i = 0; i < bps->npool; i++) {
		uint64_t a = bps->pool[i].addr;

		if ((a < lo || a >= hi) && tp_hash_put(&index, a, kept++)) {
			tp_hash_release(&index);
			return -ENOMEM;
		}
	}
	kept = 0;
	for (unsigned i = 0; i < bps->npool; i++)
		if (bps->pool[i].addr < lo || bps->pool[i].addr >= hi)
			bps->pool[kept++] = bps->pool[i];
	bps->npool = kept;
	tp_hash_release(&bps->index);
	bps->index = index;
	return (int)n;
}

struct tp_bps *tp_bps_clone(const struct tp_bps *parent, pid_t pid)
{
	struct tp_bps *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->p = parent->p;
	b->pid = pid;
	b->tramp = parent->tramp;
	b->nareas = parent->nareas;
	b->pool = malloc((parent->npool ? parent->npool : 1) * sizeof(*b->pool));
	b->areas = malloc((b->nareas ? b->nareas : 1) * sizeof(*b->areas));
	if (!b->pool || !b->areas || tp_hash_copy(&b->index, &parent->index)) {
		tp_bps_free(b);
		return NULL;
	}
	b->cap = parent->npool ? parent->npool : 1;
	b->npool = parent->npool;
	memcpy(b->pool, parent->pool, b->npool * sizeof(*b->pool));
	memcpy(b->areas, parent->areas, b->nareas * sizeof(*b->areas));
	/* The child has a copy of the stubs and records, and of the frames using them. */
	b->ret_fn = parent->ret_fn;
	b->ret_arg = parent->ret_arg;
	b->errno_tpoff = parent->errno_tpoff;
	b->errno_known = parent->errno_known;
	b->async_failed = parent->async_failed;
	b->left_scanned = true; /* the parent's areas, copied */
	if (parent->amap) {
		if (tp_bp_async_alloc(b)) {
			tp_bps_free(b);
			return NULL;
		}
		b->amap = parent->amap;
		b->anext = parent->anext;
		b->nafree = parent->nafree;
		b->naquar = parent->naquar;
		b->naheld = parent->naheld;
		memcpy(b->afree, parent->afree, b->nafree * sizeof(*b->afree));
		memcpy(b->aquar, parent->aquar, b->naquar * sizeof(*b->aquar));
		memcpy(b->aheld, parent->aheld, b->naheld * sizeof(*b->aheld));
	}
	return b;
}

int tp_bp_lookup(struct tp_bps *bps, uint64_t addr, uint64_t *hits, uint64_t *slot)
{
	struct bp *bp = tp_bp_find(bps, addr);

	if (!bp)
		return 0;
	if (hits)
		*hits = bp->hits;
	if (slot)
		*slot = bp->slot;
	return 1;
}
