/* Returns without a stop: per-call return stubs that record the return value, errno and
 * the TSC, read back in batches at the thread's next stop (reap). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <x86intrin.h>

#include "base/log.h"
#include "bp/bp-priv.h"
#include "proc/inject.h"

/* The bookkeeping of the stubs: free list, quarantine, the buffer records are read into. */
int tp_bp_async_alloc(struct tp_bps *b)
{
	b->afree = malloc(ASYNC_SLOTS * sizeof(*b->afree));
	b->aquar = malloc(ASYNC_SLOTS * sizeof(*b->aquar));
	b->aheld = malloc(ASYNC_SLOTS * sizeof(*b->aheld));
	b->rbuf = malloc(REAP_MAX * sizeof(*b->rbuf));
	return b->afree && b->aquar && b->aheld && b->rbuf ? 0 : -ENOMEM;
}

/* The stub code this tracepad writes for slot @k: a stubs' area left by another version is
 * not reused. */
static int stub_code(uint64_t amap, uint32_t k, uint8_t *code)
{
	static const struct tp_arch_rstub_layout layout = TP_RSTUB_LAYOUT;
	uint64_t at = amap + (uint64_t)k * STUB_SIZE,
		 rec = amap + ASYNC_CODE + (uint64_t)k * TP_RSTUB_REC_SIZE;
	size_t len;
	int err;

	memset(code, TP_ARCH_INT3, STUB_SIZE);
	err = tp_arch_emit_return_stub(code, STUB_ENTRY, at, rec, &layout, &len);
	if (!err)
		err = tp_arch_emit_entry_stub(code + STUB_ENTRY, STUB_SIZE - STUB_ENTRY,
					      at + STUB_ENTRY, rec, &layout, &len);
	return err;
}

/* Reuse the stubs' area an earlier attach left at b->left_stubs: its stubs whose call is
 * done (or that were never handed out) are free, the others may still run and are kept. */
static int async_adopt(struct tp_bps *b)
{
	uint64_t base = b->left_stubs;
	uint8_t want[STUB_SIZE], got[STUB_SIZE], *recs;
	struct stubs_head h;

	if (tp_proc_read(b->pid, base, &h, sizeof(h)) != sizeof(h) || h.size != ASYNC_SIZE ||
	    h.code != ASYNC_CODE || h.slots != ASYNC_SLOTS || h.stub_size != STUB_SIZE ||
	    h.rec_size != TP_RSTUB_REC_SIZE || h.written > ASYNC_SLOTS || h.written % STUB_CHUNK ||
	    h.written < STUB_CHUNK || stub_code(base, 1, want) ||
	    tp_proc_read(b->pid, base + STUB_SIZE, got, STUB_SIZE) != STUB_SIZE ||
	    memcmp(want, got, STUB_SIZE))
		return -ENOENT;
	recs = malloc((size_t)h.written * TP_RSTUB_REC_SIZE);
	if (!recs)
		return -ENOMEM;
	if (tp_proc_read(b->pid, base + ASYNC_CODE, recs, (size_t)h.written * TP_RSTUB_REC_SIZE) !=
	    (ssize_t)h.written * TP_RSTUB_REC_SIZE) {
		free(recs);
		return -EFAULT;
	}
	for (uint32_t k = h.written; k-- > 1;) {
		const uint8_t *rec = recs + (size_t)k * TP_RSTUB_REC_SIZE;
		uint32_t done;
		uint64_t ret;

		memcpy(&done, rec + TP_RSTUB_DONE, 4);
		memcpy(&ret, rec + TP_RSTUB_RET, 8);
		if (done || !ret)
			tp_bp_slot_put(b, k);
		else
			b->aheld[b->naheld++] = k;
	}
	free(recs);
	b->amap = base;
	b->anext = h.written;
	tp_dbg("bp: %d: reusing the return stubs at 0x%llx (%u free, %u may still run)", b->pid,
	       (unsigned long long)base, b->nafree, b->naheld);
	return 0;
}

/* A stub no frame uses any more. */
void tp_bp_slot_put(struct tp_bps *b, uint32_t slot)
{
	b->afree[b->nafree++] = slot;
}

/* Map the stubs' area (code RX, records RW) by injection into stopped task @tid. */
static int async_map(struct tp_bps *b, pid_t tid)
{
	uint64_t args[6] = {
	    0, ASYNC_SIZE, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0};
	int64_t ret;
	int r;

	r = tp_bp_async_alloc(b);
	if (r)
		return r;
	tp_bp_left_scan(b);
	if (b->left_stubs && !async_adopt(b))
		return 0;
	r = tp_proc_inject_syscall(b->p, b->pid, tid, SYS_mmap, args, &ret);
	if (r)
		return r;
	if (ret < 0 && ret > -4096)
		return (int)ret;
	uint64_t pargs[6] = {(uint64_t)ret + ASYNC_CODE, ASYNC_SIZE - ASYNC_CODE,
			     PROT_READ | PROT_WRITE};
	int64_t pret;

	r = tp_proc_inject_syscall(b->p, b->pid, tid, SYS_mprotect, pargs, &pret);
	if (r || pret) {
		tp_bp_unmap(b, tid, (uint64_t)ret, ASYNC_SIZE);
		return r ? r : (int)pret;
	}
	b->amap = (uint64_t)ret;
	return 0;
}

/* The next STUB_CHUNK stubs, written in one go. */
static int stubs_write(struct tp_bps *b)
{
	uint8_t code[STUB_CHUNK * STUB_SIZE];
	struct stubs_head h = {.magic = STUBS_MAGIC,
			       .size = ASYNC_SIZE,
			       .code = ASYNC_CODE,
			       .slots = ASYNC_SLOTS,
			       .stub_size = STUB_SIZE,
			       .rec_size = TP_RSTUB_REC_SIZE,
			       .written = b->anext + STUB_CHUNK};
	int r;

	for (unsigned i = 0; i < STUB_CHUNK; i++) {
		r = stub_code(b->amap, b->anext + i, code + i * STUB_SIZE);
		if (r)
			return r;
	}
	/* Stub 0 is the signature, never handed out. */
	if (!b->anext) {
		memset(code, TP_ARCH_INT3, STUB_SIZE);
		memcpy(code, &h, sizeof(h));
	}
	r = tp_proc_write(b->pid, tp_bp_stub_at(b, b->anext), code, sizeof(code));
	/* The count goes last: a later attach reuses only stubs that are there. */
	if (!r && b->anext)
		r = tp_proc_write(b->pid, b->amap + offsetof(struct stubs_head, written),
				  &h.written, sizeof(h.written));
	if (!r)
		b->anext += STUB_CHUNK;
	return r;
}

/* Quarantined slots whose call returned after all, or whose stack no longer holds their
 * stub's address (nor the real one the stub puts there as it returns), are free again. */
static void quarantine_sweep(struct tp_bps *b)
{
	struct tp_proc_piece pc[2 * SWEEP_MAX];
	uint64_t words[SWEEP_MAX];
	uint32_t done[SWEEP_MAX];
	unsigned n = b->naquar < SWEEP_MAX ? b->naquar : SWEEP_MAX, keep = 0;

	for (unsigned i = 0; i < n; i++) {
		pc[2 * i] = (struct tp_proc_piece){b->aquar[i].sp, &words[i], 8};
		pc[2 * i + 1] =
		    (struct tp_proc_piece){tp_bp_rec_at(b, b->aquar[i].slot), &done[i], 4};
	}
	if (!n)
		return;
	if (tp_proc_read_pieces(b->pid, pc, 2 * n)) {
		/* Some stack is gone (its thread exited): nothing returns through it. */
		for (unsigned i = 0; i < n; i++) {
			done[i] = 0;
			if (tp_proc_read(b->pid, pc[2 * i].addr, &words[i], 8) != 8)
				words[i] = 0;
		}
	}
	for (unsigned i = 0; i < b->naquar; i++) {
		/* Not while the stub may be running: it pushed the real return address in
		 * place of its own but has not set "done" yet. */
		if (i < n && (done[i] || (words[i] != tp_bp_stub_at(b, b->aquar[i].slot) &&
					  words[i] != b->aquar[i].ret)))
			tp_bp_slot_put(b, b->aquar[i].slot);
		else
			b->aquar[keep++] = b->aquar[i];
	}
	b->naquar = keep;
}

/* A free slot for a new frame of stopped task @tid, -1 when there is none. */
int32_t tp_bp_slot_get(struct tp_bps *b, pid_t tid)
{
	if (b->async_failed)
		return -1;
	if (!b->amap && async_map(b, tid)) {
		tp_dbg("bp: no area for return stubs in %d: every return stops", b->pid);
		b->async_failed = true;
		return -1;
	}
	if (!b->nafree && b->anext < ASYNC_SLOTS && stubs_write(b))
		return -1;
	if (!b->nafree && b->anext < ASYNC_SLOTS) {
		/* Fresh stubs: handed out in order, the last written first. */
		for (unsigned i = 0; i < STUB_CHUNK; i++)
			if (b->anext - 1 - i)
				tp_bp_slot_put(b, b->anext - 1 - i);
	}
	if (!b->nafree)
		quarantine_sweep(b);
	return b->nafree ? (int32_t)b->afree[--b->nafree] : -1;
}

void tp_bp_drop_top(struct tp_bps *b, struct shadow *s)
{
	struct frame *f = &s->f[--s->n];

	s->grave[s->ngrave++ % GRAVE] = *f;
	if (f->slot < 0 || f->borrowed)
		return;
	if (f->unhooked)
		tp_bp_slot_put(b, (uint32_t)f->slot);
	else
		b->aquar[b->naquar++] = (struct quarantined){f->sp, f->ret, (uint32_t)f->slot};
}

/* Report the calls of thread @tid that returned through their stubs, innermost first,
 * taking their frames off: from the top of the shadow stack, as long as they did.  With
 * @strict, @limit is the thread's stack pointer, and a frame below it that did not return
 * was unwound (dropped).  @running: the thread may be inside a stub right now (records
 * are read twice).  Also reads the word at @word_at into *@word (0: none). */
int tp_bp_reap_frames(struct tp_bps *b, pid_t tid, struct shadow *s, uint64_t limit, bool strict,
		      bool running, uint64_t word_at, uint64_t *word)
{
	struct tp_proc_piece pc[REAP_MAX + 1];
	uint8_t seen[REAP_MAX];

	for (;;) {
		unsigned n = 0, nrec, j = 0, beyond = 0;
		int r;

		if (word_at)
			pc[n++] = (struct tp_proc_piece){word_at, word, 8};
		/* The frames below the stack pointer, and a few above it: calls returned
		 * without a stop may sit anywhere. */
		for (unsigned i = s->n; i-- > 0 && n - (word_at ? 1 : 0) < REAP_MAX;) {
			struct frame *f = &s->f[i];

			if ((f->sp > limit || !strict) && ++beyond > 8)
				break;
			if (f->slot >= 0 && !f->unhooked && !f->borrowed) {
				pc[n] = (struct tp_proc_piece){tp_bp_rec_at(b, (uint32_t)f->slot),
							       b->rbuf[n - (word_at ? 1 : 0)],
							       TP_RSTUB_REC_SIZE};
				n++;
			}
		}
		nrec = n - (word_at ? 1 : 0);
		r = nrec ? tp_proc_read_pieces(b->pid, pc, n) : -ENODATA;
		if (r) {
			if (word_at && tp_proc_read(b->pid, word_at, word, 8) != 8)
				return -EFAULT;
			return 0; /* the records are looked at again later */
		}
		if (running) {
			/* Only a record whose "done" the first read saw is complete in the
			 * second: the stub wrote everything else before it. */
			for (unsigned i = 0; i < nrec; i++)
				seen[i] = b->rbuf[i][TP_RSTUB_DONE];
			if (tp_proc_read_pieces(b->pid, pc + (word_at ? 1 : 0), nrec))
				return 0;
			for (unsigned i = 0; i < nrec; i++)
				b->rbuf[i][TP_RSTUB_DONE] &= seen[i];
		}
		word_at = 0;
		while (s->n) {
			struct frame *f = &s->f[s->n - 1];
			const uint8_t *rec = NULL;
			uint32_t done = 0;

			if (f->slot >= 0 && !f->unhooked && !f->borrowed) {
				if (j == nrec)
					break;
				rec = b->rbuf[j++];
				memcpy(&done, rec + TP_RSTUB_DONE, 4);
			}
			if (!done) {
				if (!strict || f->sp >= limit)
					return 0;
				tp_bp_drop_top(b,
					       s); /* below the stack pointer and never returned */
				continue;
			}
			struct tp_bp_stop st = {.kind = TP_BP_STOP_RETURN,
						.func = f->func,
						.sp = f->sp,
						.ret_addr = f->ret,
						.async = true,
						.err_valid = b->errno_known};

			memcpy(&st.rax, rec + TP_RSTUB_RAX, 8);
			memcpy(&st.rdx, rec + TP_RSTUB_RDX, 8);
			memcpy(&st.xmm0, rec + TP_RSTUB_XMM0, 8);
			memcpy(&st.tsc, rec + TP_RSTUB_TSC, 8);
			memcpy(&st.entry_tsc, rec + TP_RSTUB_ENTRY_TSC, 8);
			memcpy(&st.err, rec + TP_RSTUB_ERRNO, 4);
			tp_bp_slot_put(b, (uint32_t)f->slot);
			st.depth = --s->n;
			b->ret_fn(b->ret_arg, tid, &st);
		}
		if (!s->n)
			return 0;
		/* Every record read was of a call that returned: look further down. */
	}
}

void tp_bps_set_async(struct tp_bps *bps, tp_bp_return_fn fn, void *arg)
{
	bps->ret_fn = fn;
	bps->ret_arg = arg;
}

void tp_bps_set_errno(struct tp_bps *bps, int64_t tpoff)
{
	bps->errno_tpoff = tpoff;
	bps->errno_known = true;
}

int tp_bp_leave_entry_stub(struct tp_bps *b, pid_t tid, uint64_t pc)
{
	uint32_t k = (uint32_t)((pc - b->amap) / STUB_SIZE);
	uint64_t stub = tp_bp_stub_at(b, k) + STUB_ENTRY, rec = tp_bp_rec_at(b, k), to;
	uint8_t code[STUB_SIZE];
	struct tp_insn a, d;
	struct user_regs_struct r;

	/* its first two instructions save rax and rdx into the record; the third, rdtsc, is
	 * the first to change them */
	if (stub_code(b->amap, k, code) ||
	    tp_arch_decode(code + STUB_ENTRY, STUB_SIZE - STUB_ENTRY, stub, &a) ||
	    tp_arch_decode(code + STUB_ENTRY + a.len, STUB_SIZE - STUB_ENTRY - a.len, stub + a.len,
			   &d) ||
	    tp_proc_get_regs(tid, &r) || tp_proc_read(b->pid, rec + TP_RSTUB_ENTRY_TO, &to, 8) != 8)
		return -EIO;
	if (pc > stub + a.len + d.len &&
	    (tp_proc_read(b->pid, rec + TP_RSTUB_RAX, &r.rax, 8) != 8 ||
	     tp_proc_read(b->pid, rec + TP_RSTUB_RDX, &r.rdx, 8) != 8))
		return -EIO;
	r.rip = to;
	return tp_proc_set_regs(tid, &r) ? -EIO : 0;
}

int tp_bp_stub_fault(struct tp_bps *bps, pid_t tid)
{
	struct user_regs_struct r;
	uint8_t op[2];
	uint64_t tsc;

	if (tp_proc_get_regs(tid, &r) || !tp_bp_in_stubs(bps, r.rip) ||
	    tp_proc_read(bps->pid, r.rip, op, 2) != 2 || op[0] != RDTSC_0 || op[1] != RDTSC_1)
		return 0;
	/* The program forbade rdtsc (prctl PR_SET_TSC): tracepad reads the counter for it. */
	tsc = __rdtsc();
	r.rax = (uint32_t)tsc;
	r.rdx = tsc >> 32;
	r.rip += 2;
	return tp_proc_set_regs(tid, &r) ? -EIO : 1;
}

int tp_bp_reap(struct tp_bps *bps, pid_t tid, bool running, uint64_t sp)
{
	struct shadow *s = tp_bp_shadow_of(bps, tid, false);

	if (!s || !bps->amap)
		return 0;
	return tp_bp_reap_frames(bps, tid, s, sp ? sp : UINT64_MAX, sp != 0, running && !sp, 0,
				 NULL);
}

int tp_bp_stubs_leave(struct tp_bps *b, pid_t tid, uint8_t *maybe, bool busy)
{
	struct tp_proc_piece pc[1024];
	static const uint32_t one = 1;
	size_t len = (size_t)b->anext * TP_RSTUB_REC_SIZE;
	unsigned held = 0, n = 0;
	uint8_t *recs = NULL;
	int r = 0;

	for (unsigned i = 0; i < b->naheld; i++)
		maybe[b->aheld[i]] = 1;
	for (unsigned k = 1; k < b->anext; k++)
		held += maybe[k];
	if (held || busy) {
		recs = malloc(len ? len : 1);
		if (!recs ||
		    tp_proc_read(b->pid, b->amap + ASYNC_CODE, recs, len) != (ssize_t)len) {
			free(recs);
			return recs ? -EFAULT : -ENOMEM; /* left as it is */
		}
		/* A stub whose call is done runs no more. */
		held = busy;
		for (unsigned k = 1; k < b->anext; k++) {
			uint32_t done;

			memcpy(&done, recs + (size_t)k * TP_RSTUB_REC_SIZE + TP_RSTUB_DONE, 4);
			held += maybe[k] && !done;
		}
	}
	if (!held) {
		free(recs);
		tp_dbg("bp: %d: no return stub can run: unmapping them", b->pid);
		return tid ? tp_bp_unmap(b, tid, b->amap, ASYNC_SIZE) : 0;
	}
	/* Left for a later attach: every other stub's record says it is free. */
	tp_dbg("bp: %d: %u return stubs may still run: leaving them mapped", b->pid, held);
	for (unsigned k = 1; k < b->anext && !r; k++) {
		const uint8_t *rec = recs + (size_t)k * TP_RSTUB_REC_SIZE;
		uint32_t done;
		uint64_t ret;

		memcpy(&done, rec + TP_RSTUB_DONE, 4);
		memcpy(&ret, rec + TP_RSTUB_RET, 8);
		if (maybe[k] || done || !ret)
			continue;
		pc[n++] =
		    (struct tp_proc_piece){tp_bp_rec_at(b, k) + TP_RSTUB_DONE, (void *)&one, 4};
		if (n == sizeof(pc) / sizeof(pc[0])) {
			r = tp_proc_write_pieces(b->pid, pc, n);
			n = 0;
		}
	}
	if (!r && n)
		r = tp_proc_write_pieces(b->pid, pc, n);
	free(recs);
	return r;
}
