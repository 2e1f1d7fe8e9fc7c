/* The code cache's memory: chunks near the code they translate, the links between their
 * blocks, and what happens when the cache is full (a flush: every chunk in use is retired,
 * and filled anew once no thread may run there any more). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "arch/arch.h"
#include "dbt/rt-priv.h"
#include "rt/raw.h"

#define CHUNK_SIZE TP_DBT_CHUNK_SIZE
#define CHUNKS TP_DBT_CHUNKS
#define CHUNK_REACH (1ull << 30) /* a block goes in a chunk this close to its code */
#define LINKS_MAX (CHUNK_SIZE / TP_DBT_STUB_SIZE)
#define LINKS_SIZE (4ull << 20) /* each chunk's list of linked stubs, from here on */
#define LINKS_AT (TP_DBT_REGION + 0x80000000ull)

extern const uint8_t tp_dbt_tpl_stub[];

/* A forked child gets chunks of its own (tp_dbt_cache_forked), or both would write into
 * one cache. */
static struct {
	struct tp_dbt_chunk chunks[CHUNKS];
	int nchunks;
	/* the cache's size (TRACEPAD_DBT_CACHE_SIZE): past it, every chunk in use is retired
	 * (a flush) and reused once every thread has left it */
	uint64_t limit, budget; /* bytes of code a chunk holds; the chunks in use together */
	uint64_t room;		/* what a block may take */
	uint64_t epoch;		/* 1 + the flushes so far */
	uint64_t reuses;	/* chunks filled anew so far */
	int nlive;
} K;

void tp_dbt_chunk_init(uint64_t size, uint64_t room)
{
	K.epoch = 1;
	K.room = room;
	K.budget = size ? size : CHUNKS * CHUNK_SIZE;
	/* a quarter each, so that a small cache still holds code of several regions */
	K.limit = K.budget / 4 < 2 * room ? 2 * room : K.budget / 4;
	if (K.limit > CHUNK_SIZE)
		K.limit = CHUNK_SIZE;
	if (K.budget < K.limit)
		K.budget = K.limit;
}

uint64_t tp_dbt_cache_epoch(void)
{
	return __atomic_load_n(&K.epoch, __ATOMIC_ACQUIRE);
}

uint64_t tp_dbt_cache_reuses(void)
{
	return K.reuses;
}

static uint64_t dist(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

/* A memfd of a chunk's size, mapped writable (and at @rx too when it is not 0); the fd is
 * closed at once: the mappings keep the file. */
static uint64_t chunk_map(uint64_t rx, uint64_t *rw)
{
	long fd = tp_raw2(SYS_memfd_create, "tracepad-dbt-cache", MFD_CLOEXEC), r = -EBADF, w = -1;

	if (fd < 0)
		return 0;
	if (!tp_raw2(SYS_ftruncate, fd, CHUNK_SIZE)) {
		w = tp_dbt_mmap(CHUNK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd);
		if (!tp_raw_failed(w) && rx)
			r = tp_raw6(SYS_mmap, rx, CHUNK_SIZE, PROT_READ | PROT_EXEC,
				    MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
	}
	tp_raw1(SYS_close, fd);
	if (tp_raw_failed(w))
		return 0;
	if (rx && tp_raw_failed(r)) {
		tp_raw2(SYS_munmap, w, CHUNK_SIZE);
		return 0;
	}
	*rw = (uint64_t)w;
	return rx ? (uint64_t)r : 1;
}

static struct tp_dbt_chunk *chunk_new(uint64_t pc)
{
	struct tp_dbt_chunk *c;
	uint64_t rx = 0, rw = 0;

	if (K.nchunks == CHUNKS)
		return NULL;
	/* below the code (above it when there is no room), clear of the program's own
	 * mappings and of where its brk heap grows */
	for (uint64_t k = 0; k < 32 && !rx; k++) {
		uint64_t hint = pc > CHUNK_REACH ? pc - CHUNK_REACH * 3 / 4 - k * CHUNK_SIZE
						 : pc + CHUNK_REACH / 2 + k * CHUNK_SIZE;

		rx = chunk_map(hint & ~0xffffull, &rw);
	}
	if (!rx)
		return NULL;
	c = &K.chunks[K.nchunks];
	c->rx = rx;
	c->rw = rw;
	c->used = 0;
	c->populated = 0;
	c->links_in = 0;
	c->nlinks = 0;
	c->retired = 0;
	c->free = 0;
	K.nlive++;
	/* in the runtime's region: the program's own mappings go where they would natively */
	c->links = (uint64_t *)(uintptr_t)tp_raw6(
	    SYS_mmap, LINKS_AT + (uint64_t)K.nchunks * LINKS_SIZE, LINKS_MAX * 8,
	    PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (tp_raw_failed((long)(uintptr_t)c->links))
		c->links = NULL; /* its stubs stay unlinked */
	/* a signal handler may look for the chunk of a pc meanwhile (tp_dbt_in_runtime) */
	__atomic_store_n(&K.nchunks, K.nchunks + 1, __ATOMIC_RELEASE);
	return c;
}

void tp_dbt_cache_forked(void)
{
	tp_dbt_map_forked();
	/* the other threads are not in this process */
	for (struct tp_dbt_thread *t = tp_dbt.threads; t; t = t->link)
		t->dead = t != tp_dbt_self();
	for (int i = 0; i < K.nchunks; i++) {
		struct tp_dbt_chunk *c = &K.chunks[i];
		long fd = tp_raw2(SYS_memfd_create, "tracepad-dbt-cache", MFD_CLOEXEC), w = -1,
		     r = -1;

		/* a copy of the chunk as it is, then the copy's mapping over the chunk */
		if (fd >= 0 && !tp_raw2(SYS_ftruncate, fd, CHUNK_SIZE))
			w = tp_dbt_mmap(CHUNK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd);
		if (!tp_raw_failed(w)) {
			memcpy((void *)(uintptr_t)w, (const void *)(uintptr_t)c->rx, c->used);
			r = tp_raw6(SYS_mmap, c->rx, CHUNK_SIZE, PROT_READ | PROT_EXEC,
				    MAP_SHARED | MAP_FIXED, fd, 0);
		}
		if (fd >= 0)
			tp_raw1(SYS_close, fd);
		if (tp_raw_failed(w) || tp_raw_failed(r)) {
			/* the parent's cache must not be written: no more translations here */
			tp_dbt_fail("no memory for a forked child's code cache", 0);
			K.nchunks = 0;
			return;
		}
		tp_raw2(SYS_munmap, c->rw, CHUNK_SIZE);
		c->rw = (uint64_t)w;
		c->populated = 0;
		tp_dbt_map_chunk(c->rx, c->rw);
	}
	if ((tp_dbt.boot->flags & (TP_DBT_BOOT_BREAK_ENTRY | TP_DBT_BOOT_BREAK_FORKED)) ==
	    TP_DBT_BOOT_BREAK_ENTRY)
		tp_dbt_map_unbreak_all();
}

static struct tp_dbt_chunk *chunk_of(uint64_t addr)
{
	for (int i = 0; i < K.nchunks; i++)
		if (addr - K.chunks[i].rx < CHUNK_SIZE)
			return &K.chunks[i];
	return NULL;
}

/* Write @len bytes at cache address @at, through the chunk's writable view. */
int tp_dbt_cache_write(uint64_t at, const void *src, size_t len)
{
	struct tp_dbt_chunk *c = chunk_of(at);

	if (!c)
		return -EFAULT;
	memcpy((void *)(uintptr_t)(c->rw + (at - c->rx)), src, len);
	return 0;
}

/* Write 8 bytes at @at (8-aligned) in one store: another thread may be running them. */
static void cache_store8(uint64_t at, const void *src)
{
	struct tp_dbt_chunk *c = chunk_of(at);
	uint64_t v;

	memcpy(&v, src, 8);
	if (c)
		__atomic_store_n((uint64_t *)(uintptr_t)(c->rw + (at - c->rx)), v,
				 __ATOMIC_RELEASE);
}

/* Write 4 bytes at @at (4-aligned) in one store: a jcc's rel32, which may be running. */
static void cache_store4(uint64_t at, uint32_t v)
{
	struct tp_dbt_chunk *c = chunk_of(at);

	if (c)
		__atomic_store_n((uint32_t *)(uintptr_t)(c->rw + (at - c->rx)), v,
				 __ATOMIC_RELEASE);
}

/* The address of the rel32 of the jcc whose taken exit is the stub at @stub, when linking
 * may aim it at the target (TP_DBT_STUB_JCC); else 0. */
static uint64_t jcc_site(uint64_t stub)
{
	uint64_t mark;

	memcpy(&mark, (const void *)(uintptr_t)(stub + TP_DBT_STUB_LINK), 8);
	if ((mark & ~0xffffull) != TP_DBT_STUB_JCC)
		return 0;
	return stub - (mark & 0xffff);
}

/* Link the exit stub at @stub to the block at @to: its first bytes become a jump there. */
void tp_dbt_chunk_link(uint64_t stub, uint64_t to)
{
	struct tp_dbt_chunk *c = chunk_of(stub);
	int64_t rel = (int64_t)(to - (stub + TP_ARCH_JMP32_LEN));
	uint8_t jmp[8];

	/* a retired chunk is left through the dispatcher only */
	if (!c || c->retired || !c->links || c->nlinks >= LINKS_MAX)
		return;
	if ((c->nlinks + 1) * 8 > c->links_in) {
		uint64_t to = (c->nlinks + 1) * 8 + tp_dbt_populate_step(c->links_in) / 4;

		if (to > LINKS_MAX * 8)
			to = LINKS_MAX * 8;
		tp_dbt_populate((uint64_t)(uintptr_t)c->links + c->links_in, to - c->links_in, 1);
		c->links_in = to;
	}
	c->links[c->nlinks++] = stub;
	memcpy(jmp, (const void *)(uintptr_t)stub, 8);
	if (rel == (int32_t)rel) {
		int32_t r32 = (int32_t)rel;
		uint64_t site = jcc_site(stub);
		int64_t jrel = (int64_t)(to - (site + 4));

		jmp[0] = 0xe9; /* jmp rel32 */
		memcpy(jmp + 1, &r32, 4);
		/* the stub first: a thread on its way there goes on to the target */
		cache_store8(stub, jmp);
		if (site && jrel == (int32_t)jrel)
			cache_store4(site, (uint32_t)(int32_t)jrel);
		return;
	} else {
		int32_t r32 = TP_DBT_STUB_LINK - 6;

		cache_store8(stub + TP_DBT_STUB_LINK, &to);
		jmp[0] = 0xff; /* jmp [rip + LINK] */
		jmp[1] = 0x25;
		memcpy(jmp + 2, &r32, 4);
	}
	cache_store8(stub, jmp);
}

/* Undo the links of @c's stubs whose target is in [@start, @end): they go through the
 * dispatcher again (one store each: a thread may be running them). */
static void chunk_unlink(struct tp_dbt_chunk *c, uint64_t start, uint64_t end)
{
	for (uint64_t i = 0; i < c->nlinks;) {
		uint64_t stub = c->links[i], target, site;

		memcpy(&target, (const void *)(uintptr_t)(stub + TP_DBT_STUB_TARGET), 8);
		if (target < start || target >= end) {
			i++;
			continue;
		}
		site = jcc_site(stub);
		if (site) /* the jcc back to its stub first */
			cache_store4(site, (uint32_t)(int32_t)(int64_t)(stub - (site + 4)));
		cache_store8(stub, tp_dbt_tpl_stub);
		c->links[i] = c->links[--c->nlinks];
	}
}

/* ---- a full cache ---- */

/* Every thread's lookup table emptied.  Their owners may be reading them meanwhile: only
 * the pcs are cleared, so that one that matched an entry just before still finds its
 * cache address (a block still there: chunks are reused only once every thread left). */
void tp_dbt_tables_clear(void)
{
	for (struct tp_dbt_thread *t = tp_dbt.threads; t; t = t->link) {
		uint64_t *e = (uint64_t *)(uintptr_t)t->table; /* {pc, cache} pairs */

		for (uint64_t i = 0; i < 2 * TP_DBT_IBL_SIZE; i += 2)
			if (e[i])
				__atomic_store_n(&e[i], 0, __ATOMIC_RELAXED);
	}
}

/* Where the cache may be flushed from under it: the program's code in [dispatch, next
 * dispatch) runs in the chunks of that epoch only (links and lookups lead nowhere else),
 * a retired chunk has none of its links (a thread there leaves it through the dispatcher
 * only), the gate and sigreturn pin the address a thread goes on at. */
static int near(const struct tp_dbt_chunk *c, uint64_t pc)
{
	return dist(c->rx, pc) < CHUNK_REACH && dist(c->rx + CHUNK_SIZE, pc) < CHUNK_REACH;
}

void tp_dbt_cache_pin(struct tp_dbt_thread *t, uint64_t at)
{
	t->pin = at;
	t->pin_epoch = __atomic_load_n(&K.epoch, __ATOMIC_ACQUIRE);
}

/* Every chunk in use is retired: its links undone, the lookup tables cleared. */
static void cache_flush(void)
{
	uint64_t e = K.epoch + 1;

	for (int i = 0; i < K.nchunks; i++) {
		struct tp_dbt_chunk *c = &K.chunks[i];

		if (c->retired || c->free)
			continue;
		chunk_unlink(c, 0, ~0ull);
		c->retired = e;
	}
	K.nlive = 0;
	tp_dbt_blocks_forget();
	tp_dbt_tables_clear();
	__atomic_store_n(&K.epoch, e, __ATOMIC_RELEASE);
}

/* The pc after the system call thread @tid is blocked in, or 0 (running, or not known). */
static uint64_t blocked_pc(int32_t tid)
{
	char path[48] = "/proc/self/task/", buf[256], digits[12];
	size_t n = 16, nd = 0;
	uint64_t pc = 0;
	long fd, r;

	if (tid <= 0)
		return 0;
	do
		digits[nd++] = (char)('0' + tid % 10);
	while ((tid /= 10));
	while (nd)
		path[n++] = digits[--nd];
	memcpy(path + n, "/syscall", 9);
	fd = tp_raw3(SYS_open, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	r = tp_raw3(SYS_read, fd, buf, sizeof(buf) - 1);
	tp_raw1(SYS_close, fd);
	/* "NR args... sp pc" in a system call; "running", or "-1 sp pc" otherwise */
	if (r <= 0 || buf[0] < '0' || buf[0] > '9')
		return 0;
	while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' '))
		r--;
	while (r > 0 && buf[r - 1] != 'x')
		r--;
	for (; r > 0 && buf[r] && buf[r] != '\n' && buf[r] != ' '; r++) {
		char ch = buf[r];

		pc = pc * 16 + (uint64_t)(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
	}
	return pc;
}

/* May thread @t run in retired chunk @x now or later? */
static int thread_uses(struct tp_dbt_thread *t, const struct tp_dbt_chunk *x)
{
	const struct tp_dbt_chunk *p;
	uint64_t e = t->epoch, bp;

	if (t->dead)
		return 0;
	if (t->exiting && tp_raw3(SYS_tgkill, tp_dbt.pid, t->tid, 0) == -ESRCH) {
		t->dead = 1;
		return 0;
	}
	/* where its signal handlers return to, and its vfork */
	for (int i = 0; i < t->nsave && i < TP_DBT_SAVES; i++)
		if (chunk_of(t->save[i].cache_pc) == x)
			return 1;
	if (t->vfork_pin && chunk_of(t->vfork_pin) == x)
		return 1;
	if (t->in_dispatch)
		return 0; /* it goes on in the chunks in use */
	if (t->pin) {
		/* pinned in a retired chunk: there until it dispatches */
		p = chunk_of(t->pin);
		if (p && p->retired && p->retired <= t->pin_epoch)
			return p == x || x->retired > t->pin_epoch;
		/* blocked in a system call: back there, then through the dispatcher */
		bp = blocked_pc(t->tid);
		if (bp && (p = chunk_of(bp)))
			return p == x;
		e = t->pin_epoch;
	}
	/* anywhere in the chunks in use at its epoch */
	return x->retired > e;
}

/* Free the retired chunks that no thread may run in, and take one near @pc. */
static struct tp_dbt_chunk *chunk_reuse(uint64_t pc)
{
	for (int i = 0; i < K.nchunks; i++) {
		struct tp_dbt_chunk *c = &K.chunks[i];
		struct tp_dbt_thread *t;

		if (!c->retired || c->free)
			continue;
		for (t = tp_dbt.threads; t && !thread_uses(t, c); t = t->link)
			;
		c->free = !t;
	}
	for (int i = 0; i < K.nchunks; i++) {
		struct tp_dbt_chunk *c = &K.chunks[i];

		if (!c->free || !near(c, pc))
			continue;
		c->free = 0;
		c->retired = 0;
		c->used = 0;
		c->nlinks = 0;
		K.reuses++;
		tp_dbt_map_reset(c->rx);
		K.nlive++;
		return c;
	}
	return NULL;
}

static struct tp_dbt_chunk *chunk_find(uint64_t pc)
{
	struct tp_dbt_chunk *c;
	int flushed = 0;

	for (int i = 0; i < K.nchunks; i++) {
		c = &K.chunks[i];
		if (!c->retired && !c->free && near(c, pc) && c->used + K.room <= K.limit)
			return c;
	}
	/* one more chunk in use would pass the cache's size: a flush first */
	if ((uint64_t)(K.nlive + 1) * K.limit > K.budget) {
		cache_flush();
		flushed = 1;
	}
	if ((c = chunk_reuse(pc)) || (c = chunk_new(pc)))
		return c;
	if (flushed)
		return NULL;
	cache_flush();
	return chunk_reuse(pc);
}

struct tp_dbt_chunk *tp_dbt_chunk_for(uint64_t pc)
{
	struct tp_dbt_chunk *c = chunk_find(pc);

	/* every chunk retired and still run by other threads: they leave them at their next
	 * dispatch, which needs the lock (this thread's caller owns nothing else meanwhile) */
	for (int i = 0; !c && i < 1000 && tp_dbt.threads && tp_dbt.threads->link; i++) {
		struct timespec ts = {0, 1000 * 1000};

		tp_dbt_unlock();
		tp_raw2(SYS_nanosleep, &ts, NULL);
		tp_dbt_lock();
		c = chunk_find(pc);
	}
	/* the block's room in both views, faulted in ahead in one go */
	if (c && c->used + K.room > c->populated) {
		uint64_t from = c->populated,
			 to = c->used + K.room + tp_dbt_populate_step(c->populated);

		if (to > CHUNK_SIZE)
			to = CHUNK_SIZE;
		tp_dbt_populate(c->rw + from, to - from, 1);
		tp_dbt_populate(c->rx + from, to - from, 0);
		c->populated = to;
	}
	return c;
}

void tp_dbt_chunks_unlink(uint64_t start, uint64_t end)
{
	for (int k = 0; k < K.nchunks; k++)
		chunk_unlink(&K.chunks[k], start, end);
}

int tp_dbt_in_runtime(uint64_t pc)
{
	/* the runtime and its libZydis, mapped by the launcher in the runtime's region */
	return chunk_of(pc) || (pc >= TP_DBT_RT_AT && pc < TP_DBT_HEAP_AT);
}
