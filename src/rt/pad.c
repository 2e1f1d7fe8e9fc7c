/* Jump pads: install, remove and the int3 path.  The pad's code is made by the arch writer and
 * relocator in rt's near memory; its common body is pad-entry.S.  See pad.h for the API, INTERNALS
 * for the layout. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "arch/arch.h"
#include "rt/pad.h"
#include "rt/raw.h"

#define GPR_ONLY __attribute__((target("general-regs-only")))

/* addresses a process: `calls --engine agent` hooks as many functions */
#define PADS 4096
#define PAD_CODE 256 /* near memory of one site: the pad, then the int3 path's copy */
#define JMP_LEN TP_ARCH_JMP32_LEN
#define MAX_INSNS JMP_LEN /* displaced instructions: at least one byte each */

enum { ST_FREE, ST_OFF, ST_TRAP, ST_JMP };

/* One site per address, never reused for another one: a thread may still be on its way
 * through the pad (or the int3 path's copy) of an address long after its removal. */
struct tp_rt_pad {
	uint64_t addr;	/* read by pad-entry.S (SITE_ADDR) */
	uint32_t flags; /* TP_RT_PAD_* (SITE_FLAGS) */
	int state;	/* ST_*, written under the install lock, read by the trap client */
	tp_rt_pad_fn fn;
	void *ctx;
	uint64_t entered, left; /* entries into the callback path, and exits */
	uint64_t pad, ssol;	/* the pad (jmp path); the first instruction's copy (int3 path) */
	uint8_t kind, why, covered, ninsn;
	uint8_t orig[TP_RT_PATCH_MAX]; /* the program's bytes at addr */
	uint8_t jmp[JMP_LEN];
	uint8_t ioff[MAX_INSNS];   /* displaced instructions: offsets in the program */
	uint64_t icopy[MAX_INSNS]; /* ... and addresses of their copies in the pad */
	uint32_t seq;		   /* odd while an install or a removal changes state and bytes */
	void (*entry)(void);	   /* what the pad calls: tp_rt_pad_entry or the installer's */
};
_Static_assert(__builtin_offsetof(struct tp_rt_pad, addr) == 0, "SITE_ADDR of pad-entry.S");
_Static_assert(__builtin_offsetof(struct tp_rt_pad, flags) == 8, "SITE_FLAGS of pad-entry.S");
_Static_assert(TP_RT_PAD_FPU == 2, "SITE_F_FPU of pad-entry.S");
_Static_assert(sizeof(struct tp_rt_regs) == 144, "R_* of pad-entry.S");
_Static_assert(__builtin_offsetof(struct tp_rt_pad, fn) ==
		       __builtin_offsetof(struct tp_rt_pad_head, fn) &&
		   __builtin_offsetof(struct tp_rt_pad, ctx) ==
		       __builtin_offsetof(struct tp_rt_pad_head, ctx) &&
		   __builtin_offsetof(struct tp_rt_pad, state) ==
		       __builtin_offsetof(struct tp_rt_pad_head, state),
	       "struct tp_rt_pad_head is the site's first fields");

static struct tp_rt_pad sites[PADS];
static unsigned nsites; /* published after a site's fields */
static int lock, inited;
uint64_t tp_rt_pad_xsave_size TP_RT_HIDDEN; /* read by pad-entry.S */

/* ---- the callback path, both kinds ---- */

void tp_rt_pad_hit(struct tp_rt_pad *s, const struct tp_rt_regs *r) TP_RT_HIDDEN GPR_ONLY;
void tp_rt_pad_hit(struct tp_rt_pad *s, const struct tp_rt_regs *r)
{
	tp_rt_pad_fn fn;

	if (__atomic_load_n(&s->flags, __ATOMIC_RELAXED) & TP_RT_PAD_UNCOUNTED) {
		fn = __atomic_load_n(&s->fn, __ATOMIC_ACQUIRE);
		if (fn)
			fn(r, __atomic_load_n(&s->ctx, __ATOMIC_RELAXED));
		return;
	}
	/* seq_cst: tp_rt_pad_remove clears fn and then reads entered; either it counts this
	 * entry and waits for it, or this entry sees fn cleared */
	__atomic_fetch_add(&s->entered, 1, __ATOMIC_SEQ_CST);
	fn = __atomic_load_n(&s->fn, __ATOMIC_SEQ_CST);
	if (fn)
		fn(r, __atomic_load_n(&s->ctx, __ATOMIC_RELAXED));
	__atomic_fetch_add(&s->left, 1, __ATOMIC_RELEASE);
}

GPR_ONLY int tp_rt_pad_read(const struct tp_rt_regs *regs, uint64_t addr, void *buf, size_t len)
{
	/* every page from the record up to the pad's first push under the red zone was written
	 * by this thread just now: mapped and writable */
	uint64_t lo = (uint64_t)(uintptr_t)regs, hi = ((regs->rsp - 136) | 4095) + 1;

	if (addr >= lo && addr + len >= addr && addr + len <= hi) {
		for (size_t i = 0; i < len; i++)
			((volatile uint8_t *)buf)[i] =
			    ((const volatile uint8_t *)(uintptr_t)addr)[i];
		return 0;
	}
	return tp_rt_mem_read_fast(addr, buf, len);
}

static struct tp_rt_pad *site_at(uint64_t addr)
{
	unsigned n = __atomic_load_n(&nsites, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++)
		if (sites[i].addr == addr)
			return &sites[i];
	return NULL;
}

/* A removed site holds an int3 that is not ours (a debugger's).  State and byte are read
 * between two reads of the site's sequence: a trap delivered late, as an install or a
 * removal runs, would otherwise see the old state and the new byte (an install's int3 at
 * a site still off) and be passed on to the program. */
static int foreign_trap(const struct tp_rt_pad *s)
{
	for (;;) {
		uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		int off = !(seq & 1) && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == ST_OFF;
		uint8_t b = 0;
		int foreign = off && (tp_rt_mem_read(s->addr, &b, 1) || b == TP_ARCH_INT3);

		if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) == seq)
			return foreign;
	}
}

static int on_trap(siginfo_t *si, ucontext_t *uc, void *ctx)
{
	greg_t *g = uc->uc_mcontext.gregs;
	struct tp_rt_regs r;
	struct tp_rt_pad *s;

	if (si->si_code != SI_KERNEL)
		return 0;
	/* our int3 (or the patcher's, on a site of ours): the instruction runs from its copy.
	 * A removed site's trap is ours only when its int3 is gone (delivered late). */
	s = site_at((uint64_t)g[REG_RIP] - 1);
	if (!s || !s->ssol)
		return 0;
	if (foreign_trap(s))
		return 0;
	r = (struct tp_rt_regs){
	    .rax = (uint64_t)g[REG_RAX],
	    .rbx = (uint64_t)g[REG_RBX],
	    .rcx = (uint64_t)g[REG_RCX],
	    .rdx = (uint64_t)g[REG_RDX],
	    .rsi = (uint64_t)g[REG_RSI],
	    .rdi = (uint64_t)g[REG_RDI],
	    .rbp = (uint64_t)g[REG_RBP],
	    .rsp = (uint64_t)g[REG_RSP],
	    .r8 = (uint64_t)g[REG_R8],
	    .r9 = (uint64_t)g[REG_R9],
	    .r10 = (uint64_t)g[REG_R10],
	    .r11 = (uint64_t)g[REG_R11],
	    .r12 = (uint64_t)g[REG_R12],
	    .r13 = (uint64_t)g[REG_R13],
	    .r14 = (uint64_t)g[REG_R14],
	    .r15 = (uint64_t)g[REG_R15],
	    .rip = s->addr,
	    .rflags = (uint64_t)g[REG_EFL],
	};
	tp_rt_pad_hit(s, &r);
	/* A site with a pad resumes in the pad's copy of all its displaced instructions, not
	 * at the copy of the first one: that one jumps back to the second, which the jmp's
	 * tail may cover by then. */
	g[REG_RIP] = (greg_t)(s->pad ? s->icopy[0] : s->ssol);
	return 1;
}

/* ---- building ---- */

static int init(void)
{
	unsigned a, b, c, d;
	int err;

	if (inited)
		return 0;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	if (!(c & (1u << 27))) /* OSXSAVE: else only fxsave's 512 bytes, not done here */
		return -ENOTSUP;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0xd), "c"(0));
	tp_rt_pad_xsave_size = (b + 63) & ~63u;
	if ((err = tp_rt_trap_register(on_trap, NULL)))
		return err;
	inited = 1;
	return 0;
}

/* The function around @addr: the caller's bounds, else its dynamic symbol's. */
static void fn_bounds(uint64_t addr, const struct tp_rt_pad_where *w, struct tp_arch_fn *fn)
{
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	memset(fn, 0, sizeof(*fn));
	if (w && w->fn_lo && w->fn_hi > w->fn_lo && addr >= w->fn_lo && addr < w->fn_hi) {
		fn->addr = w->fn_lo;
		fn->len = (w->pad_hi > w->fn_hi ? w->pad_hi : w->fn_hi) - w->fn_lo;
	} else if (dladdr1((void *)(uintptr_t)addr, &info, (void **)&sym, RTLD_DL_SYMENT) && sym &&
		   info.dli_saddr && sym->st_size &&
		   addr < (uint64_t)(uintptr_t)info.dli_saddr + sym->st_size) {
		fn->addr = (uint64_t)(uintptr_t)info.dli_saddr;
		fn->len = sym->st_size;
	}
	fn->code = fn->len ? (const void *)(uintptr_t)fn->addr : NULL;
}

/* The int3 path's copy of the first instruction, then a jump back; always built, since
 * the jmp path goes through an int3 while it is installed and removed. */
static void put_ssol(struct tp_arch_writer *w, struct tp_rt_pad *s, const uint8_t *code, size_t len,
		     size_t first)
{
	size_t n;

	s->ssol = tp_arch_writer_pc(w);
	if (w->err ||
	    tp_arch_relocate(code, len, s->addr, s->ssol, w->buf + w->len, w->cap - w->len, &n)) {
		w->err = w->err ? w->err : -ENOTSUP;
		return;
	}
	w->len += n;
	tp_arch_put_jmp(w, s->addr + first, TP_ARCH_BR_AUTO);
}

/* The jmp path's pad: into pad-entry.S, back, the displaced instructions, the way back.
 * Returns the reason it cannot be (TP_RT_PAD_WHY_*), 0 when written. */
static int put_pad(struct tp_arch_writer *w, struct tp_rt_pad *s, const uint8_t *code, size_t len,
		   const struct tp_rt_pad_where *where)
{
	struct tp_arch_writer scratch;
	uint8_t tmp[PAD_CODE];
	struct tp_arch_reloc res;
	struct tp_arch_fn fn;
	struct tp_insn in;
	size_t at, n;
	int err;

	s->pad = tp_arch_writer_pc(w);
	tp_arch_put_lea_rsp(w, -128);
	tp_arch_put_push_u64(w, (uint64_t)(uintptr_t)s);
	tp_arch_put_push_reg(w, TP_REG_RAX);
	tp_arch_put_mov_reg_u64(w, TP_REG_RAX, (uint64_t)(uintptr_t)s->entry);
	tp_arch_put_call_reg(w, TP_REG_RAX);
	tp_arch_put_lea_rsp(w, 144);
	if (w->err)
		return TP_RT_PAD_WHY_REACH;

	/* the checks of the relocator (decoding, function end, branches into the range) on a
	 * scratch copy, then instruction by instruction to know where each one's copy is */
	fn_bounds(s->addr, where, &fn);
	tp_arch_writer_init(&scratch, tmp, sizeof(tmp), tp_arch_writer_pc(w));
	err = tp_arch_relocate_n(&scratch, code, len, s->addr, JMP_LEN, fn.code ? &fn : NULL, &res);
	if (err)
		return res.why == TP_RELOC_BRANCH_INTO ? TP_RT_PAD_WHY_TARGET
		       : res.why == TP_RELOC_REACH     ? TP_RT_PAD_WHY_REACH
						       : TP_RT_PAD_WHY_UNMOVABLE;
	for (size_t i = 0; where && i < where->ntargets; i++)
		if (where->targets[i] > s->addr && where->targets[i] < s->addr + res.covered)
			return TP_RT_PAD_WHY_TARGET;
	s->covered = (uint8_t)res.covered;
	s->ninsn = 0;
	for (at = 0; at < res.covered; at += in.len) {
		if (tp_arch_decode(code + at, len - at, s->addr + at, &in))
			return TP_RT_PAD_WHY_UNMOVABLE;
		/* a return address or a restarted syscall inside the jmp's bytes */
		if (at + in.len < res.covered &&
		    (in.kind == TP_INSN_CALL || in.kind == TP_INSN_SYSCALL ||
		     in.kind == TP_INSN_INT || in.kind == TP_INSN_INT3))
			return TP_RT_PAD_WHY_CALL;
		/* code after a ret or jmp is reached by branches only (another function,
		 * maybe): without the function's bounds nothing says which */
		if (at + in.len < res.covered &&
		    (in.kind == TP_INSN_RET || in.kind == TP_INSN_JMP) &&
		    !(where && where->pad_hi > where->fn_hi &&
		      s->addr + at + in.len == where->fn_hi))
			return TP_RT_PAD_WHY_TARGET;
		s->ioff[s->ninsn] = (uint8_t)at;
		s->icopy[s->ninsn++] = tp_arch_writer_pc(w);
		if (w->err ||
		    tp_arch_relocate(code + at, len - at, s->addr + at, tp_arch_writer_pc(w),
				     w->buf + w->len, w->cap - w->len, &n))
			return TP_RT_PAD_WHY_UNMOVABLE;
		w->len += n;
	}
	/* a thread stopped on an inner boundary would resume inside the jmp */
	if (s->ninsn > 1 && !(s->flags & TP_RT_PAD_STOPPED))
		return TP_RT_PAD_WHY_RUNNING;
	if (res.falls_through)
		tp_arch_put_jmp(w, s->addr + res.covered, TP_ARCH_BR_32);
	if (w->err || tp_arch_emit_jmp(s->jmp, s->addr, s->pad))
		return TP_RT_PAD_WHY_REACH;
	return 0;
}

/* Read the code at @addr: up to @cap bytes, fewer before an unmapped page. */
static size_t read_code(uint64_t addr, uint8_t *buf, size_t cap)
{
	size_t n = cap;

	while (n && tp_rt_mem_read(addr, buf, n))
		n = n > (4096 - (addr & 4095)) ? 4096 - (addr & 4095) : n - 1;
	return n;
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

	tp_raw2(SYS_nanosleep, &ts, 0);
}

static void lock_take(void)
{
	while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
		tp_raw0(SYS_sched_yield);
}

static void lock_drop(void)
{
	__atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

/* A site for @addr: its own when it had one, else a new one; NULL with *err. */
static struct tp_rt_pad *site_get(uint64_t addr, int *err)
{
	struct tp_rt_pad *s = site_at(addr);

	*err = 0;
	if (s)
		return s->state == ST_OFF ? s : (*err = -EEXIST, NULL);
	for (unsigned i = 0; i < nsites; i++)
		if (sites[i].state != ST_OFF && sites[i].kind == TP_RT_PAD_KIND_JMP &&
		    addr > sites[i].addr && addr < sites[i].addr + sites[i].covered)
			return *err = -EEXIST, NULL;
	if (nsites == PADS)
		return *err = -ENOSPC, NULL;
	s = &sites[nsites];
	memset(s, 0, sizeof(*s));
	s->addr = addr;
	s->state = ST_OFF;
	return s;
}

static int build(struct tp_rt_pad *s, unsigned flags, const struct tp_rt_pad_where *where)
{
	uint8_t code[64], buf[PAD_CODE];
	struct tp_arch_writer w;
	struct tp_insn first;
	size_t len, size;
	uint64_t at;
	int why;

	len = read_code(s->addr, code, sizeof(code));
	if (!len || tp_arch_decode(code, len, s->addr, &first))
		return -EINVAL;
	if (first.kind == TP_INSN_INT3)
		return -EBUSY; /* someone else's breakpoint */
	/* a jmp that stays in rel32 reach of the program wherever the pad lands */
	if (!(at = tp_rt_near_alloc(s->addr, PAD_CODE)))
		return -ENOMEM;
	tp_arch_writer_init(&w, buf, sizeof(buf), at);
	why = flags & TP_RT_PAD_TRAP ? TP_RT_PAD_WHY_ASKED : put_pad(&w, s, code, len, where);
	if (why) {
		tp_arch_writer_init(&w, buf, sizeof(buf), at);
		s->pad = 0;
		s->covered = 0;
		s->ninsn = 0;
	}
	put_ssol(&w, s, code, len, first.len);
	if (w.err || tp_arch_writer_finish(&w, &size))
		return -ENOTSUP; /* the one refusal: not even the int3 path's copy can run */
	if (tp_rt_near_write(at, buf, size))
		return -EIO;
	memcpy(s->orig, code, TP_RT_PATCH_MAX < len ? TP_RT_PATCH_MAX : len);
	s->why = (uint8_t)why;
	s->kind = why ? TP_RT_PAD_KIND_INT3 : TP_RT_PAD_KIND_JMP;
	return 0;
}

int tp_rt_pad_install(uint64_t addr, tp_rt_pad_fn fn, void *ctx, unsigned flags,
		      const struct tp_rt_pad_where *where, struct tp_rt_pad **out)
{
	return tp_rt_pad_install_entry(addr, fn, ctx, flags, where, NULL, out);
}

int tp_rt_pad_install_entry(uint64_t addr, tp_rt_pad_fn fn, void *ctx, unsigned flags,
			    const struct tp_rt_pad_where *where, void (*entry)(void),
			    struct tp_rt_pad **out)
{
	const uint8_t int3 = TP_ARCH_INT3;
	uint8_t from[JMP_LEN];
	struct tp_rt_pad *s;
	int err, fresh;

	if (!addr || !fn || !out)
		return -EINVAL;
	lock_take();
	if ((err = init()) || !(s = site_get(addr, &err)))
		goto out;
	fresh = s == &sites[nsites];
	__atomic_fetch_add(&s->seq, 1, __ATOMIC_SEQ_CST);
	s->flags = flags;
	/* an old site keeps its code: a thread may be in it still, and the program's did not
	 * change; only a pad never built (int3 asked for before) is built now */
	if (!entry)
		entry = tp_rt_pad_entry;
	/* a pad calling another entry is built anew (the old one stays for threads in it) */
	if (fresh || (s->pad && s->entry != entry) ||
	    (!(flags & TP_RT_PAD_TRAP) && !s->pad &&
	     (s->why == TP_RT_PAD_WHY_ASKED || s->why == TP_RT_PAD_WHY_RUNNING))) {
		s->entry = entry;
		if ((err = build(s, flags, where)))
			goto done;
	} else if (flags & TP_RT_PAD_TRAP) {
		s->kind = TP_RT_PAD_KIND_INT3;
		s->why = TP_RT_PAD_WHY_ASKED;
	} else if (s->pad && (s->ninsn == 1 || (flags & TP_RT_PAD_STOPPED))) {
		s->kind = TP_RT_PAD_KIND_JMP;
		s->why = TP_RT_PAD_WHY_NONE;
	} else if (s->pad) {
		s->kind = TP_RT_PAD_KIND_INT3;
		s->why = TP_RT_PAD_WHY_RUNNING;
	}
	s->flags = flags;
	__atomic_store_n(&s->ctx, ctx, __ATOMIC_RELAXED);
	__atomic_store_n(&s->fn, fn, __ATOMIC_SEQ_CST);
	if (fresh)
		__atomic_store_n(&nsites, nsites + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&s->state, ST_TRAP, __ATOMIC_RELEASE);
	/* int3 first (the int3 path is then in place: a thread meeting it is handled), then
	 * the jmp over it */
	if ((err = tp_rt_patch(addr, s->orig, &int3, 1, 0)))
		goto err_off;
	if (s->kind == TP_RT_PAD_KIND_JMP) {
		from[0] = TP_ARCH_INT3;
		memcpy(from + 1, s->orig + 1, JMP_LEN - 1);
		if ((err = tp_rt_patch(addr, from, s->jmp, JMP_LEN, s->pad))) {
			tp_rt_patch(addr, &int3, s->orig, 1, s->ssol);
			goto err_off;
		}
		__atomic_store_n(&s->state, ST_JMP, __ATOMIC_RELEASE);
	}
	*out = s;
	goto done;
err_off:
	__atomic_store_n(&s->fn, NULL, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->state, ST_OFF, __ATOMIC_RELEASE);
done:
	__atomic_fetch_add(&s->seq, 1, __ATOMIC_SEQ_CST);
out:
	lock_drop();
	return err;
}

/* The bytes back and the callback cleared; the caller holds the lock. */
static int unlink_site(struct tp_rt_pad *s)
{
	const uint8_t int3 = TP_ARCH_INT3;
	uint8_t cur[JMP_LEN];
	size_t n;
	int err = 0;

	__atomic_fetch_add(&s->seq, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->fn, NULL, __ATOMIC_SEQ_CST);
	/* a thread meeting the patcher's int3 goes through the pad, or the copy */
	if (s->state == ST_JMP)
		err = tp_rt_patch(s->addr, s->jmp, s->orig, JMP_LEN, s->pad);
	else if (s->state == ST_TRAP)
		err = tp_rt_patch(s->addr, &int3, s->orig, 1, s->ssol);
	/* the program's bytes back already (by tracepad's crash guard, before it died): off */
	n = s->state == ST_JMP ? JMP_LEN : 1;
	if (err && s->state != ST_OFF && !tp_rt_mem_read(s->addr, cur, n) &&
	    !memcmp(cur, s->orig, n))
		err = 0;
	if (err && s->state != ST_OFF)
		goto out; /* the bytes are not ours any more: leave them */
	__atomic_store_n(&s->state, ST_OFF, __ATOMIC_RELEASE);
	err = 0;
out:
	__atomic_fetch_add(&s->seq, 1, __ATOMIC_SEQ_CST);
	return err;
}

int tp_rt_pad_remove(struct tp_rt_pad *s)
{
	int err, i;

	if (!s)
		return -EINVAL;
	lock_take();
	err = unlink_site(s);
	if (err)
		goto out;
	for (i = 0; i < 20000; i++) {
		if (!tp_rt_pad_busy(s))
			break;
		sleep_us(100);
	}
	err = i < 20000 ? 0 : -EBUSY;
out:
	lock_drop();
	return err;
}

int tp_rt_pad_unlink(struct tp_rt_pad *s)
{
	int err;

	if (!s)
		return -EINVAL;
	lock_take();
	err = unlink_site(s);
	lock_drop();
	return err;
}

void tp_rt_pad_forget(struct tp_rt_pad *s)
{
	lock_take();
	__atomic_fetch_add(&s->seq, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->fn, NULL, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->state, ST_OFF, __ATOMIC_RELEASE);
	/* no address matches it any more (site_at, site_get): the slot is not reused */
	__atomic_store_n(&s->addr, 0, __ATOMIC_RELEASE);
	__atomic_fetch_add(&s->seq, 1, __ATOMIC_SEQ_CST);
	lock_drop();
}

uint64_t tp_rt_pad_busy(const struct tp_rt_pad *s)
{
	return __atomic_load_n(&s->entered, __ATOMIC_SEQ_CST) -
	       __atomic_load_n(&s->left, __ATOMIC_ACQUIRE);
}

size_t tp_rt_pad_layout(const struct tp_rt_pad *s, uint8_t *ioff, uint64_t *icopy, size_t max)
{
	size_t n = 0;

	if (s->kind != TP_RT_PAD_KIND_JMP)
		return 0;
	for (; n < s->ninsn && n < max; n++) {
		ioff[n] = s->ioff[n];
		icopy[n] = s->icopy[n];
	}
	return n;
}

size_t tp_rt_pad_covered(const struct tp_rt_pad *s)
{
	return s->kind == TP_RT_PAD_KIND_JMP ? s->covered : 1;
}

enum tp_rt_pad_kind tp_rt_pad_kind(const struct tp_rt_pad *p)
{
	return (enum tp_rt_pad_kind)p->kind;
}

enum tp_rt_pad_why tp_rt_pad_why(const struct tp_rt_pad *p)
{
	return (enum tp_rt_pad_why)p->why;
}

size_t tp_rt_pad_len(const struct tp_rt_pad *p)
{
	return p->kind == TP_RT_PAD_KIND_JMP ? JMP_LEN : 1;
}

uint64_t tp_rt_pad_hits(const struct tp_rt_pad *p)
{
	return __atomic_load_n(&p->entered, __ATOMIC_RELAXED);
}
