/* The built-in `memory` plugin of `tracepad calls`: follows libc's allocator calls and, when a
 * process exits, sorts the blocks it still holds as valgrind's memcheck does (definitely,
 * indirectly and possibly lost, still reachable), reported by allocation backtrace. */
#include "plugins/plugins.h"

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

#define MEM_SELECT                                                                                 \
	"libc:malloc,libc:calloc,libc:realloc,libc:reallocarray,libc:free,libc:posix_memalign,"    \
	"libc:aligned_alloc,libc:memalign,libc:valloc,libc:pvalloc"

#define BT_DEFAULT 12 /* memcheck's --num-callers */
#define BT_MAX 64

/* glibc's malloc puts a chunk header (prev_size, size|flags) right below each block. */
#define CHUNK_HDR 16
#define CHUNK_FLAGS 0x7ULL
#define CHUNK_MMAPPED 0x2ULL
/* Arenas of other threads live in heaps aligned to HEAP_MAX_SIZE that start with heap_info,
 * whose ar_ptr points just past a heap_info (32 bytes) at the start of the arena's first heap. */
#define ARENA_HEAP_ALIGN (64ULL << 20)
#define ARENA_HEAP_INFO 32

enum mem_fn {
	FN_NONE,
	FN_MALLOC,
	FN_CALLOC,
	FN_REALLOC,
	FN_REALLOCARRAY,
	FN_FREE,
	FN_POSIX_MEMALIGN,
	FN_MEMALIGN, /* memalign and aligned_alloc: one address in glibc, the same arguments */
	FN_VALLOC,
	FN_PVALLOC,
};

static const struct {
	const char *name;
	enum mem_fn fn;
} fn_names[] = {
    {"malloc", FN_MALLOC},
    {"calloc", FN_CALLOC},
    {"realloc", FN_REALLOC},
    {"reallocarray", FN_REALLOCARRAY},
    {"free", FN_FREE},
    {"posix_memalign", FN_POSIX_MEMALIGN},
    {"aligned_alloc", FN_MEMALIGN},
    {"memalign", FN_MEMALIGN},
    {"valloc", FN_VALLOC},
    {"pvalloc", FN_PVALLOC},
};

/* Block states, in memcheck's order of strength during the root scan. */
enum { ST_DEFINITE, ST_INDIRECT, ST_POSSIBLE, ST_REACHABLE, ST_NKINDS };

static const char *const kind_names[ST_NKINDS] = {
    [ST_DEFINITE] = "definitely lost",
    [ST_INDIRECT] = "indirectly lost",
    [ST_POSSIBLE] = "possibly lost",
    [ST_REACHABLE] = "still reachable",
};

/* A live block; addr 0 marks an empty slot of the table, 1 a deleted one. */
struct block {
	uint64_t addr;
	uint64_t size;
	uint32_t site;
};

struct block_table {
	struct block *slot;
	size_t cap, used, dead;
};

/* An allocation backtrace, interned: blocks refer to it by index (0: none). */
struct site {
	int pid;
	unsigned n;
	uint64_t pcs[];
};

#define NREGS (sizeof(struct user_regs_struct) / 8)

/* The registers of a thread, taken at its exit stop: the engine may let it go on exiting
 * before the process's last thread stops, and they are what memcheck scans. */
struct exit_regs {
	int tid;
	uint64_t regs[NREGS];
};

struct mem_proc {
	int pid;
	struct block_table blocks;
	uint64_t allocs, frees, bytes;
	struct exit_regs *xregs;
	size_t nxregs, xregs_cap;
	int last_exit_tid; /* stopped at its exit while PROC_EXIT is reported */
	struct mem_proc *next;
};

/* The allocator call a thread is in, if any: calls made inside it (realloc(NULL, n) calling
 * malloc) are the allocator's own business and are not counted again. */
struct mem_thread {
	int pid, tid;
	bool busy;
	unsigned depth;
	enum mem_fn fn;
	uint64_t args[3];
	uint32_t site;
	struct mem_thread *next;
};

struct mem {
	struct tracepad_host h;
	unsigned bt_depth;
	bool summary_only;
	struct mem_proc *procs;
	struct mem_thread *threads;
	struct site **sites; /* sites[0] unused */
	size_t nsites, sites_cap;
	uint32_t *site_hash; /* open addressing over indexes into sites */
	size_t site_hash_cap;
	bool lost_track; /* out of memory once: the report says so */
};

/* c->user of an allocator call nested in another one. */
static char nested_call;

static enum mem_fn fn_of(const char *name)
{
	size_t len;

	if (!name)
		return FN_NONE;
	len = strcspn(name, "@"); /* "realloc@@GLIBC_2.2.5" */
	for (size_t i = 0; i < sizeof(fn_names) / sizeof(fn_names[0]); i++)
		if (strlen(fn_names[i].name) == len && !strncmp(fn_names[i].name, name, len))
			return fn_names[i].fn;
	return FN_NONE;
}

static uint64_t hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* --- the live blocks of one process --- */

static int blocks_grow(struct block_table *t)
{
	size_t cap = t->cap ? t->cap : 1024;
	struct block *old = t->slot, *slot;
	size_t oldcap = t->cap;

	if (t->used * 2 >= cap)
		cap *= 2;
	slot = calloc(cap, sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	for (size_t i = 0; i < oldcap; i++) {
		size_t j;

		if (old[i].addr <= 1)
			continue;
		for (j = hash64(old[i].addr) & (cap - 1); slot[j].addr; j = (j + 1) & (cap - 1))
			;
		slot[j] = old[i];
	}
	free(old);
	t->slot = slot;
	t->cap = cap;
	t->dead = 0;
	return 0;
}

static struct block *blocks_find(const struct block_table *t, uint64_t addr)
{
	if (!t->cap)
		return NULL;
	for (size_t j = hash64(addr) & (t->cap - 1);; j = (j + 1) & (t->cap - 1)) {
		if (t->slot[j].addr == addr)
			return &t->slot[j];
		if (!t->slot[j].addr)
			return NULL;
	}
}

static int blocks_add(struct block_table *t, uint64_t addr, uint64_t size, uint32_t site)
{
	struct block *b = blocks_find(t, addr);
	size_t j;

	if (b) { /* its free() escaped us: the new block replaces it */
		b->size = size;
		b->site = site;
		return 0;
	}
	if ((t->used + t->dead + 1) * 10 >= t->cap * 7) {
		int err = blocks_grow(t);

		if (err)
			return err;
	}
	for (j = hash64(addr) & (t->cap - 1); t->slot[j].addr > 1; j = (j + 1) & (t->cap - 1))
		;
	if (t->slot[j].addr == 1)
		t->dead--;
	t->slot[j] = (struct block){addr, size, site};
	t->used++;
	return 0;
}

static bool blocks_drop(struct block_table *t, uint64_t addr)
{
	struct block *b = blocks_find(t, addr);

	if (!b)
		return false;
	b->addr = 1;
	t->used--;
	t->dead++;
	return true;
}

/* --- allocation sites --- */

static uint64_t site_key(int pid, const uint64_t *pcs, unsigned n)
{
	uint64_t h = hash64((uint64_t)pid + n);

	for (unsigned i = 0; i < n; i++)
		h = hash64(h ^ pcs[i]);
	return h;
}

static int site_hash_grow(struct mem *m)
{
	size_t cap = m->site_hash_cap ? m->site_hash_cap * 2 : 1024;
	uint32_t *h = calloc(cap, sizeof(*h));

	if (!h)
		return -ENOMEM;
	for (size_t i = 1; i < m->nsites; i++) {
		const struct site *s = m->sites[i];
		size_t j = site_key(s->pid, s->pcs, s->n) & (cap - 1);

		while (h[j])
			j = (j + 1) & (cap - 1);
		h[j] = i;
	}
	free(m->site_hash);
	m->site_hash = h;
	m->site_hash_cap = cap;
	return 0;
}

/* The index of backtrace @pcs in process @pid, added if new; 0 when out of memory. */
static uint32_t site_intern(struct mem *m, int pid, const uint64_t *pcs, unsigned n)
{
	uint64_t key = site_key(pid, pcs, n);
	struct site *s;
	size_t j;

	if (m->nsites * 10 >= m->site_hash_cap * 7 && site_hash_grow(m))
		goto err_nomem;
	for (j = key & (m->site_hash_cap - 1); m->site_hash[j];
	     j = (j + 1) & (m->site_hash_cap - 1)) {
		s = m->sites[m->site_hash[j]];
		if (s->pid == pid && s->n == n && !memcmp(s->pcs, pcs, n * sizeof(*pcs)))
			return m->site_hash[j];
	}
	if (m->nsites == m->sites_cap) {
		size_t cap = m->sites_cap * 2;
		struct site **v = realloc(m->sites, cap * sizeof(*v));

		if (!v)
			goto err_nomem;
		m->sites = v;
		m->sites_cap = cap;
	}
	s = malloc(sizeof(*s) + n * sizeof(*pcs));
	if (!s)
		goto err_nomem;
	s->pid = pid;
	s->n = n;
	memcpy(s->pcs, pcs, n * sizeof(*pcs));
	m->sites[m->nsites] = s;
	m->site_hash[j] = m->nsites;
	return m->nsites++;

err_nomem:
	m->lost_track = true;
	return 0;
}

/* --- processes and threads --- */

static struct mem_proc *proc_find(struct mem *m, int pid)
{
	for (struct mem_proc *p = m->procs; p; p = p->next)
		if (p->pid == pid)
			return p;
	return NULL;
}

static struct mem_proc *proc_get(struct mem *m, int pid)
{
	struct mem_proc *p = proc_find(m, pid);

	if (p)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p) {
		m->lost_track = true;
		return NULL;
	}
	p->pid = pid;
	p->next = m->procs;
	m->procs = p;
	return p;
}

static void proc_drop(struct mem *m, int pid)
{
	for (struct mem_proc **pp = &m->procs; *pp; pp = &(*pp)->next) {
		struct mem_proc *p = *pp;

		if (p->pid != pid)
			continue;
		*pp = p->next;
		free(p->blocks.slot);
		free(p->xregs);
		free(p);
		return;
	}
}

static struct mem_thread *thread_find(struct mem *m, int tid)
{
	for (struct mem_thread *t = m->threads; t; t = t->next)
		if (t->tid == tid)
			return t;
	return NULL;
}

static void threads_drop(struct mem *m, int pid, int tid)
{
	struct mem_thread **tp = &m->threads;

	while (*tp) {
		struct mem_thread *t = *tp;

		if (t->pid == pid && (tid < 0 || t->tid == tid)) {
			*tp = t->next;
			free(t);
		} else {
			tp = &t->next;
		}
	}
}

/* --- the calls --- */

static void mem_call(void *priv, struct tracepad_call *c)
{
	struct mem *m = priv;
	enum mem_fn fn = fn_of(c->function);
	struct mem_thread *t;
	struct mem_proc *p;

	if (fn == FN_NONE)
		return;
	t = thread_find(m, c->tid);
	if (t && t->pid != c->pid) { /* a tid reused by another process */
		threads_drop(m, t->pid, t->tid);
		t = NULL;
	}
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t) {
			m->lost_track = true;
			return;
		}
		t->pid = c->pid;
		t->tid = c->tid;
		t->next = m->threads;
		m->threads = t;
	}
	/* Inside another allocator call of this thread: glibc's own business (realloc(NULL, n)
	 * calls malloc), counted once.  At that call's depth or above, it was left without
	 * returning (longjmp out of a signal handler) and is over. */
	if (t->busy && c->depth > t->depth) {
		c->user = &nested_call;
		return;
	}
	/* Threads that exited before this call are gone for good: only those that exit with
	 * the process keep their registers for the leak check. */
	p = proc_find(m, c->pid);
	if (p) {
		p->nxregs = 0;
		p->last_exit_tid = 0;
	}
	t->busy = true;
	t->depth = c->depth;
	t->fn = fn;
	memcpy(t->args, c->args, sizeof(t->args));
	t->site = 0;
	if (fn != FN_FREE && m->bt_depth && m->h.backtrace) {
		uint64_t pcs[BT_MAX];
		int n = m->h.backtrace(m->h.ctx, c->tid, pcs, m->bt_depth);

		if (n > 0)
			t->site = site_intern(m, c->pid, pcs, n);
	}
	c->user = t;
}

static void record_alloc(struct mem *m, struct mem_proc *p, uint64_t addr, uint64_t size,
			 uint32_t site)
{
	if (!addr)
		return;
	p->allocs++;
	p->bytes += size;
	if (blocks_add(&p->blocks, addr, size, site))
		m->lost_track = true;
}

static void record_free(struct mem_proc *p, uint64_t addr)
{
	if (!addr)
		return;
	p->frees++;
	blocks_drop(&p->blocks, addr);
}

static void mem_ret(void *priv, struct tracepad_call *c)
{
	struct mem *m = priv;
	struct mem_thread *t = thread_find(m, c->tid);
	struct mem_proc *p;
	uint64_t size, addr = c->retval, old, page;

	if (!t || c->user != t || !t->busy)
		return;
	t->busy = false;
	p = proc_get(m, c->pid);
	if (!p)
		return;
	switch (t->fn) {
	case FN_MALLOC:
	case FN_VALLOC:
		record_alloc(m, p, addr, t->args[0], t->site);
		break;
	case FN_PVALLOC:
		page = (uint64_t)sysconf(_SC_PAGESIZE);
		size = t->args[0] ? (t->args[0] + page - 1) & ~(uint64_t)(page - 1) : page;
		record_alloc(m, p, addr, size, t->site);
		break;
	case FN_CALLOC:
		if (!__builtin_mul_overflow(t->args[0], t->args[1], &size))
			record_alloc(m, p, addr, size, t->site);
		break;
	case FN_MEMALIGN:
		record_alloc(m, p, addr, t->args[1], t->site);
		break;
	case FN_POSIX_MEMALIGN:
		if ((int)c->retval != 0)
			break;
		if (m->h.read(m->h.ctx, c->pid, t->args[0], &addr, sizeof(addr)) != sizeof(addr)) {
			m->lost_track = true;
			break;
		}
		record_alloc(m, p, addr, t->args[2], t->site);
		break;
	case FN_REALLOC:
	case FN_REALLOCARRAY:
		old = t->args[0];
		if (t->fn == FN_REALLOC)
			size = t->args[1];
		else if (__builtin_mul_overflow(t->args[1], t->args[2], &size))
			break; /* ENOMEM, the old block stays */
		if (addr) {
			record_free(p, old);
			record_alloc(m, p, addr, size, t->site);
		} else if (!size) {
			record_free(p, old); /* glibc frees on realloc(p, 0) */
		}
		break;
	case FN_FREE:
		record_free(p, t->args[0]);
		break;
	case FN_NONE:
		break;
	}
}

/* --- the leak check --- */

struct lblock {
	uint64_t addr, size;
	uint64_t next_chunk;	 /* where glibc's next chunk header starts, 0 if unknown */
	uint64_t map_lo, map_hi; /* its own mapping, for a block in an mmapped chunk */
	uint64_t indirect;	 /* bytes of the blocks its clique holds (definitely lost ones) */
	uint32_t site;
	uint8_t state;
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
	bool short_read; /* part of a block could not be read */
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
		if (b->state == ST_REACHABLE)
			return 0;
		if (v == b->addr && definite) {
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

struct group {
	uint8_t kind;
	uint32_t site;
	uint64_t blocks, bytes, indirect;
};

static int cmp_kind_site(const void *a, const void *b)
{
	const struct lblock *x = a, *y = b;

	if (x->state != y->state)
		return x->state - y->state;
	return x->site < y->site ? -1 : x->site > y->site;
}

static int cmp_group(const void *a, const void *b)
{
	const struct group *x = a, *y = b;
	uint64_t sx = x->bytes + x->indirect, sy = y->bytes + y->indirect;

	if (sx != sy)
		return sx > sy ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind - y->kind;
	return x->site < y->site ? -1 : x->site > y->site;
}

static void print_site(struct mem *m, int pid, uint32_t site)
{
	FILE *out = m->h.out;
	const struct site *st = site ? m->sites[site] : NULL;

	if (!st) {
		fprintf(out, "    (no backtrace)\n");
		return;
	}
	for (unsigned i = 0; i < st->n; i++) {
		char sym[512] = "?";

		/* The frames above the first are return addresses: the call is the byte before. */
		if (!m->h.symbolize ||
		    m->h.symbolize(m->h.ctx, pid, i ? st->pcs[i] - 1 : st->pcs[i], sym,
				   sizeof(sym)) < 0)
			snprintf(sym, sizeof(sym), "?");
		fprintf(out, "    #%u 0x%" PRIx64 " %s\n", i, st->pcs[i], sym);
	}
}

static void report(struct mem *m, struct scan *s, const struct mem_proc *p)
{
	uint64_t kb[ST_NKINDS] = {0}, kn[ST_NKINDS] = {0}, inuse = 0;
	FILE *out = m->h.out;
	struct group *g = NULL;
	size_t ng = 0;

	for (size_t i = 0; i < s->n; i++) {
		kb[s->b[i].state] += s->b[i].size;
		kn[s->b[i].state]++;
		inuse += s->b[i].size;
	}
	fprintf(out, "memory: pid %d: in use at exit: %" PRIu64 " bytes in %zu blocks\n", p->pid,
		inuse, s->n);
	fprintf(out,
		"memory: pid %d: total heap usage: %" PRIu64 " allocs, %" PRIu64 " frees, %" PRIu64
		" bytes allocated\n",
		p->pid, p->allocs, p->frees, p->bytes);
	if (!m->summary_only && s->n) {
		qsort(s->b, s->n, sizeof(*s->b), cmp_kind_site);
		g = calloc(s->n, sizeof(*g));
	}
	if (g) {
		for (size_t i = 0; i < s->n; i++) {
			const struct lblock *b = &s->b[i];

			if (!ng || g[ng - 1].kind != b->state || g[ng - 1].site != b->site)
				g[ng++] = (struct group){.kind = b->state, .site = b->site};
			g[ng - 1].blocks++;
			g[ng - 1].bytes += b->size;
			g[ng - 1].indirect += b->indirect;
		}
		qsort(g, ng, sizeof(*g), cmp_group);
		for (size_t i = 0; i < ng; i++) {
			if (g[i].indirect)
				fprintf(out,
					"memory: %" PRIu64 " (%" PRIu64 " direct, %" PRIu64
					" indirect) bytes in %" PRIu64 " blocks are %s\n",
					g[i].bytes + g[i].indirect, g[i].bytes, g[i].indirect,
					g[i].blocks, kind_names[g[i].kind]);
			else
				fprintf(out,
					"memory: %" PRIu64 " bytes in %" PRIu64 " blocks are %s\n",
					g[i].bytes, g[i].blocks, kind_names[g[i].kind]);
			print_site(m, s->pid, g[i].site);
		}
		free(g);
	}
	fprintf(out, "memory: pid %d: leak summary:\n", p->pid);
	for (int k = 0; k < ST_NKINDS; k++)
		fprintf(out, "memory: %18s: %" PRIu64 " bytes in %" PRIu64 " blocks\n",
			kind_names[k], kb[k], kn[k]);
	if (m->lost_track)
		fprintf(out,
			"memory: pid %d: out of memory while tracking: blocks may be missing\n",
			p->pid);
	if (s->short_read)
		fprintf(out, "memory: pid %d: some blocks could not be read whole\n", p->pid);
	fflush(out);
}

/* The whole process is stopped at its exit: classify and report what it still holds. */
static int leak_check(struct mem *m, struct mem_proc *p)
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
	for (size_t i = 0; i < p->blocks.cap; i++) {
		const struct block *b = &p->blocks.slot[i];

		if (b->addr > 1)
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
	report(m, &s, p);

err_free:
	free(maps);
	free(tids);
	free(s.stack);
	free(s.buf);
	free(s.b);
	return err;
}

static void mem_process(void *priv, int pid, enum tracepad_proc_event ev)
{
	struct mem *m = priv;
	struct mem_proc *p;
	int err;

	switch (ev) {
	case TRACEPAD_PROC_START:
		/* A new image, or a child: it holds none of the blocks we know of. */
		proc_drop(m, pid);
		threads_drop(m, pid, -1);
		proc_get(m, pid);
		break;
	case TRACEPAD_PROC_EXIT:
		p = proc_find(m, pid);
		if (!p)
			break;
		err = leak_check(m, p);
		if (err)
			tp_warn("memory: leak check of pid %d failed: %s", pid, strerror(-err));
		proc_drop(m, pid);
		threads_drop(m, pid, -1);
		break;
	case TRACEPAD_PROC_DETACH:
		proc_drop(m, pid);
		threads_drop(m, pid, -1);
		break;
	}
}

static void mem_thread(void *priv, int pid, int tid, enum tracepad_thread_event ev)
{
	struct mem *m = priv;
	struct mem_proc *p = proc_find(m, pid);

	if (ev != TRACEPAD_THREAD_EXIT)
		return;
	threads_drop(m, pid, tid);
	if (!p)
		return;
	p->last_exit_tid = tid;
	if (!m->h.regs)
		return;
	if (p->nxregs == p->xregs_cap) {
		size_t cap = p->xregs_cap ? p->xregs_cap * 2 : 8;
		struct exit_regs *v = realloc(p->xregs, cap * sizeof(*v));

		if (!v)
			return; /* its registers will be read at the process's exit, if they can be
				 */
		p->xregs = v;
		p->xregs_cap = cap;
	}
	if (!m->h.regs(m->h.ctx, tid, p->xregs[p->nxregs].regs, NREGS))
		p->xregs[p->nxregs++].tid = tid;
}

static void mem_fini(void *priv)
{
	struct mem *m = priv;

	while (m->procs)
		proc_drop(m, m->procs->pid);
	while (m->threads)
		threads_drop(m, m->threads->pid, -1);
	for (size_t i = 1; i < m->nsites; i++)
		free(m->sites[i]);
	free(m->sites);
	free(m->site_hash);
	free(m);
}

static int parse_args(struct mem *m, const char *args)
{
	char *copy, *tok, *save = NULL;
	int err = 0;

	if (!args || !*args)
		return 0;
	copy = strdup(args);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v;

		if (!strcmp(tok, "summary")) {
			m->summary_only = true;
		} else if (!strncmp(tok, "depth=", 6)) {
			errno = 0;
			v = strtoul(tok + 6, &end, 10);
			if (errno || end == tok + 6 || *end || v > BT_MAX) {
				tp_err("memory: depth must be 0 to %d: %s", BT_MAX, tok);
				err = -EINVAL;
				break;
			}
			m->bt_depth = v;
		} else {
			tp_err("memory: unknown argument %s (depth=N, summary)", tok);
			err = -EINVAL;
			break;
		}
	}
	free(copy);
	return err;
}

int tp_plugin_memory_init(const struct tracepad_host *host, const char *args,
			  struct tracepad_plugin *plugin)
{
	struct mem *m;
	int err;

	if (!host || host->abi != TRACEPAD_PLUGIN_ABI || !host->read || !host->select || !host->out)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->h = *host;
	m->bt_depth = BT_DEFAULT;
	m->sites_cap = 1024;
	m->sites = calloc(m->sites_cap, sizeof(*m->sites));
	m->nsites = 1;
	err = -ENOMEM;
	if (!m->sites || site_hash_grow(m))
		goto err_free;
	err = parse_args(m, args);
	if (err)
		goto err_free;
	err = host->select(host->ctx, MEM_SELECT);
	if (err)
		goto err_free;
	*plugin = (struct tracepad_plugin){
	    .name = "memory",
	    .priv = m,
	    .call = mem_call,
	    .ret = mem_ret,
	    .process = mem_process,
	    .thread = mem_thread,
	    .fini = mem_fini,
	};
	return 0;

err_free:
	mem_fini(m);
	return err;
}
