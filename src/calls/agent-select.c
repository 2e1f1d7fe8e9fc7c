/* `tracepad calls --engine agent`: which functions the agent hooks and how (engine.c's
 * selection, the stack walkers, IFUNC implementations, each function's bounds and alignment
 * padding), written into the block that the agent maps (hooks-abi.h).  Any function may be
 * hooked: the agent calls none of libc's while the pads are placed or live (its memcpy and
 * the like are its own, libZydis's imports bound to them: src/agent/own-libc.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arch/arch.h"
#include "base/log.h"
#include "calls/agent-priv.h"
#include "proc/inject.h"

/* Functions that walk the thread's stack from their caller on (with libgcc's unwinder, which
 * glibc may load only then): the agent puts the real return addresses back first. */
static const char *const walkers[] = {
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_ForcedUnwind",
    "_Unwind_Backtrace",
    "backtrace",
    "__backtrace",
    "pthread_exit",
    "__pthread_exit",
};

static bool is_walker(const char *name)
{
	for (size_t i = 0; i < sizeof(walkers) / sizeof(walkers[0]); i++)
		if (!strcmp(name, walkers[i]))
			return true;
	return false;
}

struct pick {
	struct session *s;
	struct image *im;
	struct agent *a;
	uint32_t max;
	unsigned over;
	uint32_t known; /* after a dlopen: the functions hooked already, not picked again */
};

/* What the agent does at function @f's entry (TP_HK_F_*), 0 for nothing. */
static uint32_t hook_flags(struct session *s, struct image *im, const struct func *f)
{
	uint8_t code[64];
	ssize_t got;
	uint32_t fl = 0;

	/* the entry point: the thread is there already, none of the program's code ran */
	if (f->addr == im->entry)
		return 0;
	if (f->kind == F_UNWIND || f->kind == F_BACKTRACE || is_walker(f->name))
		fl |= TP_HK_F_WALK;
	if (f->kind == F_BACKTRACE || strstr(f->name, "backtrace") || strstr(f->name, "Backtrace"))
		fl |= fl & TP_HK_F_WALK ? TP_HK_F_RETURNS : 0;
	if (f->kind == F_CATCH)
		fl |= TP_HK_F_CATCH;
	if (f->kind == F_RBRK && f->addr == im->rbrk && im->rdebug)
		fl |= TP_HK_F_RBRK;
	if (!f->shown || f->kind == F_RESOLVER || f->kind == F_RBRK)
		return fl;
	fl |= TP_HK_F_SHOWN;
	/* as the ptrace engine: never the return of a function that returns twice, is jumped
	 * to, or reads its own return address; nor of an unwinder's walk */
	got = tp_proc_read(im->pid, f->addr, code, sizeof(code));
	if (f->hooked && !(fl & TP_HK_F_WALK) && !tp_calls_caller_sensitive(f->name) && got > 0 &&
	    !tp_arch_reads_return_slot(code, (size_t)got, f->addr))
		fl |= TP_HK_F_RET;
	(void)s;
	return fl;
}

static int pick_one(void *arg, uint64_t addr, uint64_t *v)
{
	struct pick *p = arg;
	struct func *f = (struct func *)(uintptr_t)*v;
	uint32_t fl;

	for (uint32_t j = 0; j < p->known; j++)
		if (p->a->hfs[j].addr == addr && !(p->a->hfs[j].flags & TP_HK_F_GONE))
			return 0;
	fl = hook_flags(p->s, p->im, f);
	if (!fl)
		return 0;
	if (p->a->n == p->max) {
		p->over++;
		return 0;
	}
	if (p->a->hfs) {
		p->a->hfs[p->a->n] = (struct tp_hk_func){.addr = addr, .flags = fl};
		p->a->func_of[p->a->n] = f;
	}
	p->a->n++;
	return 0;
}

/* The bounds of each hooked function (the relocator's checks), from its object's symbols:
 * the agent never asks the loader (dladdr) while every other thread is stopped. */
/* Is @len bytes of code at @addr (@code) nothing but alignment padding: nops (0x90, 0x0f
 * 0x1f with any operand, behind 0x66 and segment prefixes) and int3s? */
static bool padding(const uint8_t *code, size_t len, uint64_t addr)
{
	for (size_t at = 0; at < len;) {
		struct tp_insn in;
		size_t k = at;

		if (tp_arch_decode(code + at, len - at, addr + at, &in))
			return false;
		while (k < at + in.len && (code[k] == 0x66 || code[k] == 0x2e || code[k] == 0x3e))
			k++;
		if (!(code[k] == 0x90 || code[k] == 0xcc ||
		      (code[k] == 0x0f && k + 1 < at + in.len && code[k + 1] == 0x1f)))
			return false;
		at += in.len;
	}
	return true;
}

/* The padding after a function that ends at @hi before a 16-byte boundary, up to the next
 * function: its end, or 0 when there is none (rt/pad.h's pad_hi). */
static uint64_t pad_end(pid_t pid, const struct tp_fsyms *fs, uint64_t bias, uint64_t hi)
{
	uint64_t end = (hi + 15) & ~15ull;
	uint8_t code[16];

	for (int k = 0; k < fs->n; k++)
		if (fs->f[k].vaddr + bias >= hi && fs->f[k].vaddr + bias < end)
			end = fs->f[k].vaddr + bias;
	if (end <= hi || tp_proc_read(pid, hi, code, end - hi) != (ssize_t)(end - hi) ||
	    !padding(code, end - hi, hi))
		return 0;
	return end;
}

static void set_bounds(struct image *im, struct agent *a, uint32_t from)
{
	for (int i = 0; i < im->nobjs; i++) {
		struct object *o = im->objs[i];
		struct tp_fsyms fs;

		/* the tables the functions were selected from: debug-only ones have sizes */
		if (tp_fsyms_read(o->path, o->debug_syms, &fs))
			continue;
		for (uint32_t j = from; j < a->n; j++) {
			struct tp_hk_func *h = &a->hfs[j];

			if (a->func_of[j]->obj != o || a->func_of[j]->ifunc_impl)
				continue;
			for (int k = 0; k < fs.n; k++)
				if (fs.f[k].vaddr + o->bias == h->addr && fs.f[k].size) {
					h->fn_lo = h->addr;
					h->fn_hi = h->addr + fs.f[k].size;
					h->pad_hi = pad_end(a->pid, &fs, o->bias, h->fn_hi);
					break;
				}
		}
		tp_fsyms_release(&fs);
	}
}

/* The walkers of every object, selected or not (unshown when not). */
static int add_walkers(struct session *s, struct image *im)
{
	for (int i = 0; i < im->nobjs; i++) {
		struct object *o = im->objs[i];
		struct tp_fsyms fs;
		int r = 0;

		if (tp_fsyms_read(o->path, o->debug_syms, &fs))
			continue;
		for (int k = 0; k < fs.n && r != -ENOMEM; k++) {
			uint64_t at = fs.f[k].vaddr + o->bias;

			for (int j = 0; j < fs.f[k].nnames; j++)
				if (is_walker(fs.f[k].names[j]) && at >= o->lo && at < o->hi &&
				    !tp_calls_func_find(im, at)) {
					r = tp_calls_func_add(s, im, im->pid, o, at,
							      fs.f[k].names[j], F_UNWIND);
					break;
				}
		}
		tp_fsyms_release(&fs);
		if (r == -ENOMEM)
			return r;
	}
	return 0;
}

struct resolvers {
	struct func **v;
	int n;
};

static int resolver_of(void *arg, uint64_t addr, uint64_t *v)
{
	struct resolvers *rs = arg;
	struct func *f = (struct func *)(uintptr_t)*v, **n;

	(void)addr;
	if (f->kind != F_RESOLVER)
		return 0;
	n = realloc(rs->v, (rs->n + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	rs->v = n;
	rs->v[rs->n++] = f;
	return 0;
}

/* The IFUNC resolvers of selected functions (strlen, memcpy...) ran before the entry point:
 * each one is asked again with a call injected into a stopped task (it answers as it did
 * to the loader), and what it answers is hooked under the selected name, as the ptrace
 * engine does at attach. */
static int resolve_ifuncs(struct session *s, struct image *im, pid_t tid)
{
	struct resolvers rs = {0};
	int r = tp_hash_foreach(&im->funcs, resolver_of, &rs);

	for (int i = 0; !r && i < rs.n; i++) {
		uint64_t impl = 0;

		if (!tp_proc_inject_fcall(s->p, im->pid, tid, rs.v[i]->addr, (const uint64_t[6]){0},
					  false, &impl) &&
		    impl) {
			tp_dbg("calls: IFUNC %s: 0x%" PRIx64, rs.v[i]->name, impl);
			tp_calls_resolved(s, im, tid, rs.v[i], impl);
		}
	}
	free(rs.v);
	return r;
}

static int block_new(struct session *s, struct image *im, struct agent *a)
{
	struct pick p = {s, im, a, TP_HK_MAX_FUNCS, 0, 0};
	uint64_t rings_off, cfa_off, data_off, funcs_off = sizeof(struct tp_hk_ctl);

	tp_hash_foreach(&im->funcs, pick_one, &p);
	if (p.over)
		tp_warn("%u selected functions cannot be traced with --engine agent (at most %d)",
			p.over, TP_HK_MAX_FUNCS);
	/* room for the functions of objects dlopen'ed later */
	rings_off =
	    (funcs_off + (uint64_t)TP_HK_MAX_FUNCS * sizeof(struct tp_hk_func) + 63) & ~63ull;
	cfa_off = (rings_off + RINGS * sizeof(struct tp_ftp_ring) + 63) & ~63ull;
	data_off = (cfa_off + TP_HK_CFA_SLOTS * sizeof(struct tp_hk_cfa) + 4095) & ~4095ull;
	a->size = data_off + (uint64_t)RINGS * RING_SIZE;
	a->fd = (int)syscall(SYS_memfd_create, "tracepad-hooks", 1u /* MFD_CLOEXEC */);
	if (a->fd < 0)
		return -errno;
	if (ftruncate(a->fd, (off_t)a->size))
		return -errno;
	a->ctl = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
	if (a->ctl == MAP_FAILED) {
		a->ctl = NULL;
		return -errno;
	}
	*a->ctl = (struct tp_hk_ctl){
	    .magic = TP_HK_MAGIC,
	    .abi = TP_HK_ABI,
	    .nfuncs = a->n,
	    .size = a->size,
	    .funcs_off = funcs_off,
	    .rings_off = rings_off,
	    .data_off = data_off,
	    .nrings = RINGS,
	    .ring_size = RING_SIZE,
	    .tracer_pid = (int32_t)getpid(),
	    .funcs_cap = TP_HK_MAX_FUNCS,
	    .cfa_off = cfa_off,
	};
	a->hfs = (struct tp_hk_func *)((uint8_t *)a->ctl + funcs_off);
	a->func_of = calloc(TP_HK_MAX_FUNCS, sizeof(*a->func_of));
	if (!a->func_of)
		return -ENOMEM;
	p.a->n = 0;
	tp_hash_foreach(&im->funcs, pick_one, &p);
	set_bounds(im, a, 0);
	return 0;
}

int tp_calls_agent_select_more(struct session *s, struct agent *a, uint32_t *first)
{
	struct image *im = a->im;
	/* each function's object, compared by address after the sync frees the functions of
	 * objects gone (freed after new ones are made: an address is never both) */
	struct object **was = calloc(a->n ? a->n : 1, sizeof(*was));
	struct pick p = {s, im, a, TP_HK_MAX_FUNCS, 0, a->n};
	int r;

	if (!was)
		return -ENOMEM;
	for (uint32_t j = 0; j < a->n; j++)
		was[j] = a->func_of[j] ? a->func_of[j]->obj : NULL;
	*first = a->n;
	r = tp_calls_objects_sync(s, im, a->pid);
	s->objects_gen++;
	for (uint32_t j = 0; j < a->n; j++) {
		bool live = false;

		for (int i = 0; was[j] && i < im->nobjs && !live; i++)
			live = im->objs[i] == was[j];
		if (was[j] && !live) {
			a->hfs[j].flags |= TP_HK_F_GONE;
			a->func_of[j] = NULL;
		}
	}
	free(was);
	if (!r)
		r = add_walkers(s, im);
	if (r)
		return r;
	tp_hash_foreach(&im->funcs, pick_one, &p);
	if (p.over)
		tp_warn("%u selected functions cannot be traced with --engine agent (at most %d)",
			p.over, TP_HK_MAX_FUNCS);
	set_bounds(im, a, *first);
	return 0;
}

int tp_calls_agent_select(struct session *s, struct image *im, struct agent *a, pid_t tid)
{
	int r = add_walkers(s, im);

	if (!r)
		r = resolve_ifuncs(s, im, tid);
	if (r)
		return r;
	return block_new(s, im, a);
}
