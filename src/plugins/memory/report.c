/* The leak check of the `memory` plugin, at a process's exit: memcheck's classification of
 * the blocks still allocated (roots: the registers of every thread and the writable mappings
 * that are not malloc's own; definitely, indirectly, possibly lost, still reachable) and its
 * report grouped by allocation backtrace. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/user.h>
#include <unistd.h>

#include "base/log.h"
#include "plugins/memory/memory-priv.h"

struct lblock {
	uint64_t addr, size;
	uint64_t next_chunk;	 /* where glibc's next chunk header starts, 0 if unknown */
	uint64_t map_lo, map_hi; /* its own mapping, for a block in an mmapped chunk */
	uint64_t indirect;	 /* bytes of the blocks its clique holds (definitely lost ones) */
	uint32_t site;
	uint8_t state;
	uint8_t heur; /* still reachable only through a heuristic's interior pointer */
	bool mmapped;
};

struct pmap {
	uint64_t start, end;
	char perms[5];
	char path[256];
};

struct scan {
	struct mem *m;
	int pid;
	struct lblock *b;
	size_t n;
	uint64_t lo, hi; /* lowest start and highest end of the blocks */
	size_t *stack;
	size_t nstack, stack_cap;
	uint64_t *buf; /* read buffer */
	size_t buf_words;
	bool short_read;	 /* part of a block could not be read */
	const struct pmap *maps; /* the process's mappings, in address order */
	size_t nmaps;
};

static int cmp_lblock(const void *a, const void *b)
{
	const struct lblock *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The block whose [start, end) holds @v (a zero-size block holds its start), or -1. */
static long find_block(const struct scan *s, uint64_t v)
{
	size_t lo = 0, hi = s->n;

	if (v < s->lo || v >= s->hi)
		return -1;
	while (lo < hi) { /* first block starting above v */
		size_t mid = lo + (hi - lo) / 2;

		if (s->b[mid].addr <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return -1;
	lo--;
	if (v == s->b[lo].addr || v < s->b[lo].addr + s->b[lo].size)
		return lo;
	return -1;
}

static int push(struct scan *s, size_t i)
{
	if (s->nstack == s->stack_cap) {
		size_t cap = s->stack_cap ? s->stack_cap * 2 : 1024;
		size_t *v = realloc(s->stack, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->stack = v;
		s->stack_cap = cap;
	}
	s->stack[s->nstack++] = i;
	return 0;
}

/* ---- memcheck's leak-check heuristics (--leak-check-heuristics=all, its default) ----
 * Interior pointers that C++ runtimes and sqlite keep to their blocks as a rule make the
 * block reachable as a start pointer would: the length and capacity before a (pre-C++11)
 * std::string's characters, a 64-bit length before the data (sqlite), the element count
 * before a new[] array, a second base's vtable pointer (multiple inheritance). */
#define VTABLE_WORDS 20 /* words of a vtable looked at for two function pointers */

static bool read_word(struct scan *s, uint64_t a, uint64_t *w)
{
	return !(a & 7) && s->m->h.read(s->m->h.ctx, s->pid, a, w, 8) == 8;
}

/* The mapping of a file that holds @a, or NULL. */
static const struct pmap *file_map_of(const struct scan *s, uint64_t a)
{
	size_t lo = 0, hi = s->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->maps[mid].end <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == s->nmaps || s->maps[lo].start > a || s->maps[lo].path[0] != '/')
		return NULL;
	return &s->maps[lo];
}

/* Does @a look like a vtable: in a readable file mapping, with two function pointers (into
 * executable file mappings) before anything else but nulls? */
static bool is_vtable(struct scan *s, uint64_t a)
{
	const struct pmap *pm = file_map_of(s, a), *fm;
	uint64_t last, w;
	int nfn = 0;

	if (!pm || pm->perms[0] != 'r')
		return false;
	last = a + (VTABLE_WORDS - 1) * 8 < pm->end - 8 ? a + (VTABLE_WORDS - 1) * 8 : pm->end - 8;
	for (; a <= last; a += 8) {
		if (!read_word(s, a, &w))
			return false;
		if (!w)
			continue;
		fm = file_map_of(s, w);
		if (!fm || fm->perms[2] != 'x')
			return false;
		if (++nfn == 2)
			return true;
	}
	return false;
}

/* The heuristic by which interior pointer @v makes block @b reachable, or H_NONE. */
static int heuristic(struct scan *s, const struct lblock *b, uint64_t v)
{
	uint64_t w0, w1, wv;

	if (b->size >= 25 && v == b->addr + 24 && read_word(s, b->addr + 8, &w1) &&
	    24 + w1 + 1 == b->size && read_word(s, b->addr, &w0) && w0 <= w1)
		return H_STDSTRING;
	if (b->size >= 8 && v == b->addr + 8 && read_word(s, b->addr, &w0) && w0) {
		if (b->size - 8 == w0)
			return H_LENGTH64;
		if ((b->size - 8) % w0 == 0)
			return H_NEWARRAY;
	}
	if (!(v & 7) && v + 8 <= b->addr + b->size && read_word(s, v, &wv) && !(wv & 7) &&
	    wv >= 4096 && read_word(s, b->addr, &w0) && !(w0 & 7) && w0 >= 4096 &&
	    is_vtable(s, wv) && is_vtable(s, w0))
		return H_MULTIPLE;
	return H_NONE;
}

/* One word that may point into a block, seen from a root or a block (@definite: from a root
 * or a still reachable block), or while collecting the clique of lost block @clique. */
static int mark(struct scan *s, uint64_t v, bool definite, long clique)
{
	long i = find_block(s, v);
	struct lblock *b;

	if (i < 0)
		return 0;
	b = &s->b[i];
	/* glibc's bins, top and last_remainder hold chunk headers, and the header of the next
	 * chunk lies inside the last word of a block that fills its chunk: memcheck, whose own
	 * allocator has no such pointers, never sees them. */
	if (v != b->addr && v == b->next_chunk)
		return 0;
	if (clique < 0) {
		if (b->state == ST_REACHABLE) {
			if (v == b->addr)
				b->heur = H_NONE; /* reached by a start pointer after all */
			return 0;
		}
		if (definite && (v == b->addr || (b->heur = (uint8_t)heuristic(s, b, v)))) {
			b->state = ST_REACHABLE;
			return push(s, i);
		}
		if (b->state == ST_DEFINITE) {
			b->state = ST_POSSIBLE;
			return push(s, i);
		}
		return 0;
	}
	/* Like memcheck, a clique takes interior pointers as well. */
	if (b->state == ST_DEFINITE && i != clique) {
		s->b[clique].indirect += b->size + b->indirect;
		b->indirect = 0;
		b->state = ST_INDIRECT;
		return push(s, i);
	}
	return 0;
}

/* Every aligned word of [@start, @end) of the traced process: pages that cannot be read are
 * skipped.  Returns 0 or -ENOMEM. */
static int scan_range(struct scan *s, uint64_t start, uint64_t end, bool definite, long clique,
		      bool *short_read)
{
	const struct tracepad_host *h = &s->m->h;
	uint64_t a = (start + 7) & ~7ULL;

	end &= ~7ULL;
	while (a < end) {
		size_t len = end - a;
		long got;

		if (len > s->buf_words * 8)
			len = s->buf_words * 8;
		got = h->read(h->ctx, s->pid, a, s->buf, len);
		if (got < 8) {
			if (short_read)
				*short_read = true;
			a = (a | 4095) + 1; /* the next page */
			continue;
		}
		for (long w = 0; w < got / 8; w++) {
			int err = mark(s, s->buf[w], definite, clique);

			if (err)
				return err;
		}
		a += got & ~7L;
	}
	return 0;
}

static int drain(struct scan *s, long clique)
{
	while (s->nstack) {
		struct lblock *b = &s->b[s->stack[--s->nstack]];
		int err = scan_range(s, b->addr, b->addr + b->size, b->state == ST_REACHABLE,
				     clique, &s->short_read);

		if (err)
			return err;
	}
	return 0;
}

struct read_maps {
	struct pmap *v;
	size_t n, cap;
};

static int read_map(void *arg, const struct tracepad_map *m)
{
	struct read_maps *rm = arg;
	struct pmap pm = {.start = m->start, .end = m->end};

	memcpy(pm.perms, m->perms, sizeof(pm.perms));
	snprintf(pm.path, sizeof(pm.path), "%s", m->path);
	if (rm->n == rm->cap) {
		size_t cap = rm->cap ? rm->cap * 2 : 64;
		struct pmap *nv = realloc(rm->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		rm->v = nv;
		rm->cap = cap;
	}
	rm->v[rm->n++] = pm;
	return 0;
}

/* The mappings of @pid, from the host. */
static int read_maps(const struct tracepad_host *h, int pid, struct pmap **out, size_t *nout)
{
	struct read_maps rm = {0};
	int err;

	if (!h->maps)
		return -ENOSYS;
	err = h->maps(h->ctx, pid, read_map, &rm);
	if (err) {
		free(rm.v);
		return err;
	}
	*out = rm.v;
	*nout = rm.n;
	return 0;
}

/* The first block starting at or above @a. */
static size_t lower_bound(const struct scan *s, uint64_t a)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->b[mid].addr < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Is mapping @pm memory that memcheck would not scan as a root: malloc's own heaps, devices? */
static bool not_a_root(struct scan *s, const struct pmap *pm)
{
	const struct tracepad_host *h = &s->m->h;
	uint64_t ar_ptr;
	size_t i;

	if (pm->perms[0] != 'r' || pm->perms[1] != 'w')
		return true;
	if (!strcmp(pm->path, "[heap]"))
		return true;
	/* tracepad's own blocks in the program (the agent engine's rings hold copies of the
	 * program's values), as memcheck does not scan valgrind's memory */
	if (!strncmp(pm->path, "/memfd:tracepad-", 16))
		return true;
	if (!strncmp(pm->path, "/dev/", 5) && strcmp(pm->path, "/dev/zero") &&
	    strncmp(pm->path, "/dev/shm/", 9))
		return true;
	/* A mapping holding a block that is not an mmapped chunk is one of malloc's heaps. */
	for (i = lower_bound(s, pm->start); i < s->n && s->b[i].addr < pm->end; i++)
		if (!s->b[i].mmapped)
			return true;
	/* The heap of another thread's arena, none of whose blocks is left. */
	if (!(pm->start & (ARENA_HEAP_ALIGN - 1)) &&
	    h->read(h->ctx, s->pid, pm->start, &ar_ptr, sizeof(ar_ptr)) == sizeof(ar_ptr) &&
	    (ar_ptr & (ARENA_HEAP_ALIGN - 1)) == ARENA_HEAP_INFO)
		return true;
	return false;
}

/* Scan [@lo, @hi) of a root mapping, leaving out the mmapped chunks of blocks inside it. */
static int scan_root(struct scan *s, uint64_t lo, uint64_t hi)
{
	size_t first = lower_bound(s, lo);

	/* The block before @lo may own an mmapped chunk that @lo falls into. */
	for (size_t i = first ? first - 1 : 0; i < s->n && s->b[i].addr < hi && lo < hi; i++) {
		const struct lblock *b = &s->b[i];
		int err;

		if (!b->mmapped || b->map_hi <= lo || b->map_lo >= hi)
			continue;
		if (b->map_lo > lo) {
			err = scan_range(s, lo, b->map_lo, true, -1, NULL);
			if (err)
				return err;
		}
		lo = b->map_hi;
	}
	return lo < hi ? scan_range(s, lo, hi, true, -1, NULL) : 0;
}

/* Roots as memcheck has them: every readable and writable mapping but malloc's heaps (data
 * and .bss of the objects, thread stacks from their stack pointer up, other anonymous
 * memory), then the general registers of every thread. */
static int scan_roots(struct scan *s, const struct exit_regs *xr, size_t nxr,
		      const struct pmap *maps, size_t nmaps)
{
	/* r15 .. rdi and rsp in struct user_regs_struct: what memcheck's GP registers are. */
	static const size_t gp[] = {
	    offsetof(struct user_regs_struct, r15), offsetof(struct user_regs_struct, r14),
	    offsetof(struct user_regs_struct, r13), offsetof(struct user_regs_struct, r12),
	    offsetof(struct user_regs_struct, rbp), offsetof(struct user_regs_struct, rbx),
	    offsetof(struct user_regs_struct, r11), offsetof(struct user_regs_struct, r10),
	    offsetof(struct user_regs_struct, r9),  offsetof(struct user_regs_struct, r8),
	    offsetof(struct user_regs_struct, rax), offsetof(struct user_regs_struct, rcx),
	    offsetof(struct user_regs_struct, rdx), offsetof(struct user_regs_struct, rsi),
	    offsetof(struct user_regs_struct, rdi), offsetof(struct user_regs_struct, rsp),
	};
	int err;

	for (size_t t = 0; t < nxr; t++) {
		for (size_t r = 0; r < sizeof(gp) / sizeof(gp[0]); r++) {
			err = mark(s, xr[t].regs[gp[r] / 8], true, -1);
			if (err)
				return err;
		}
	}
	for (size_t i = 0; i < nmaps; i++) {
		uint64_t lo = maps[i].start;

		if (not_a_root(s, &maps[i]))
			continue;
		/* Below a thread's stack pointer is dead stack, which memcheck does not scan. */
		for (size_t t = 0; t < nxr; t++) {
			uint64_t sp = xr[t].regs[offsetof(struct user_regs_struct, rsp) / 8];

			if (sp >= maps[i].start && sp < maps[i].end && sp > lo)
				lo = sp;
		}
		err = scan_root(s, lo, maps[i].end);
		if (err)
			return err;
	}
	return drain(s, -1);
}

/* Where the block lies in glibc's heap: the next chunk's header, or its own mmapped chunk. */
static void read_chunk(struct scan *s, struct lblock *b)
{
	const struct tracepad_host *h = &s->m->h;
	uint64_t hdr[2], csize;

	if (b->addr < CHUNK_HDR ||
	    h->read(h->ctx, s->pid, b->addr - CHUNK_HDR, hdr, sizeof(hdr)) != sizeof(hdr))
		return;
	csize = hdr[1] & ~CHUNK_FLAGS;
	if (csize < b->size + 8 || csize > b->size + (1ULL << 32))
		return; /* not glibc's layout: no chunk to account for */
	if (hdr[1] & CHUNK_MMAPPED) {
		/* prev_size is the alignment padding before the chunk in its mapping */
		b->mmapped = true;
		b->map_lo = b->addr - CHUNK_HDR - hdr[0];
		b->map_hi = b->addr - CHUNK_HDR + csize;
	} else {
		b->next_chunk = b->addr - CHUNK_HDR + csize;
	}
}

static int cmp_kind_site(const void *a, const void *b)
{
	const struct lblock *x = a, *y = b;

	if (x->state != y->state)
		return x->state - y->state;
	return x->site < y->site ? -1 : x->site > y->site;
}

static int cmp_group(const void *a, const void *b)
{
	const struct leak_group *x = a, *y = b;
	uint64_t sx = x->bytes + x->indirect, sy = y->bytes + y->indirect;

	if (sx != sy)
		return sx > sy ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind - y->kind;
	return x->site < y->site ? -1 : x->site > y->site;
}

/* The totals and, unless only the summary is wanted, the records grouped by kind and
 * allocation site, largest first; then the report. */
static void report(struct mem *m, struct scan *s, const struct mem_proc *p, int nthreads)
{
	struct leak_result r = {
	    .pid = p->pid, .nthreads = nthreads, .inuse_blocks = s->n, .short_read = s->short_read};

	for (size_t i = 0; i < s->n; i++) {
		const struct lblock *b = &s->b[i];

		r.kind_bytes[b->state] += b->size;
		r.kind_blocks[b->state]++;
		if (b->state == ST_REACHABLE && b->heur) {
			r.heur_bytes[b->heur] += b->size;
			r.heur_blocks[b->heur]++;
		}
		r.inuse_bytes += b->size;
	}
	if (!m->summary_only && s->n) {
		qsort(s->b, s->n, sizeof(*s->b), cmp_kind_site);
		r.groups = calloc(s->n, sizeof(*r.groups));
	}
	for (size_t i = 0; r.groups && i < s->n; i++) {
		const struct lblock *b = &s->b[i];
		struct leak_group *g = &r.groups[r.ngroups - (r.ngroups > 0)];

		if (!r.ngroups || g->kind != b->state || g->site != b->site) {
			g = &r.groups[r.ngroups++];
			*g = (struct leak_group){.kind = b->state, .site = b->site};
		}
		g->blocks++;
		g->bytes += b->size;
		g->indirect += b->indirect;
	}
	if (r.groups)
		qsort(r.groups, r.ngroups, sizeof(*r.groups), cmp_group);
	tp_mem_report(m, s->pid, p, &r);
	free(r.groups);
}

/* The whole process is stopped at its exit: classify and report what it still holds. */
int tp_mem_leak_check(struct mem *m, struct mem_proc *p)
{
	const struct tracepad_host *h = &m->h;
	struct scan s = {.m = m, .pid = p->pid, .buf_words = 8192};
	int *tids = NULL, ntids = 0, err = -ENOMEM;
	struct pmap *maps = NULL;
	size_t n = 0, nmaps = 0;

	s.b = calloc(p->blocks.used ? p->blocks.used : 1, sizeof(*s.b));
	s.buf = malloc(s.buf_words * 8);
	if (!s.b || !s.buf)
		goto err_free;
	for (size_t i = 0; i < p->blocks.npool; i++) {
		const struct block *b = &p->blocks.pool[i];

		if (b->addr)
			s.b[n++] =
			    (struct lblock){.addr = b->addr, .size = b->size, .site = b->site};
	}
	s.n = n;
	qsort(s.b, n, sizeof(*s.b), cmp_lblock);
	if (h->threads) {
		for (int max = 64;; max *= 4) {
			int *v = realloc(tids, max * sizeof(*v));

			if (!v)
				goto err_free;
			tids = v;
			ntids = h->threads(h->ctx, p->pid, tids, max);
			if (ntids <= max)
				break;
		}
		if (ntids < 0)
			ntids = 0;
	}
	/* Registers of the threads still here that did not report their exit stop yet. */
	for (int t = 0; t < ntids; t++) {
		bool known = false;

		for (size_t x = 0; x < p->nxregs && !known; x++)
			known = p->xregs[x].tid == tids[t];
		if (known || !h->regs)
			continue;
		if (p->nxregs == p->xregs_cap) {
			size_t cap = p->xregs_cap ? p->xregs_cap * 2 : 8;
			struct exit_regs *v = realloc(p->xregs, cap * sizeof(*v));

			if (!v)
				goto err_free;
			p->xregs = v;
			p->xregs_cap = cap;
		}
		if (!h->regs(h->ctx, tids[t], p->xregs[p->nxregs].regs, NREGS))
			p->xregs[p->nxregs++].tid = tids[t];
	}
	/* A thread-group leader that has exited has no memory left to show, and the engine may
	 * have let it go: read the process through the thread stopped at its exit now. */
	if (p->last_exit_tid)
		s.pid = p->last_exit_tid;
	err = read_maps(&m->h, s.pid, &maps, &nmaps);
	if (err || !nmaps) {
		free(maps);
		maps = NULL;
		nmaps = 0;
		s.pid = p->pid;
		err = read_maps(&m->h, s.pid, &maps, &nmaps);
	}
	for (int t = 0; (err || !nmaps) && t < ntids; t++) {
		free(maps);
		maps = NULL;
		nmaps = 0;
		err = read_maps(&m->h, tids[t], &maps, &nmaps);
		if (!err && nmaps)
			s.pid = tids[t];
	}
	if (err)
		goto err_free;
	if (n) {
		s.lo = s.b[0].addr;
		for (size_t i = 0; i < n; i++) {
			uint64_t end = s.b[i].addr + (s.b[i].size ? s.b[i].size : 1);

			if (end > s.hi)
				s.hi = end;
			read_chunk(&s, &s.b[i]);
		}
	}
	s.maps = maps;
	s.nmaps = nmaps;
	err = scan_roots(&s, p->xregs, p->nxregs, maps, nmaps);
	if (err)
		goto err_free;
	/* Each block left unreached leads the clique of unreached blocks it points to, in
	 * address order as memcheck does, so that a leader pointed to by a later one joins it. */
	for (size_t i = 0; i < n; i++) {
		if (s.b[i].state != ST_DEFINITE)
			continue;
		err = push(&s, i);
		if (!err)
			err = drain(&s, i);
		if (err)
			goto err_free;
	}
	report(m, &s, p, ntids);

err_free:
	free(maps);
	free(tids);
	free(s.stack);
	free(s.buf);
	free(s.b);
	return err;
}
