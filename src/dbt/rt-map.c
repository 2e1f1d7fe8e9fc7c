/* From cache addresses back to program addresses: for each translated block, where in its
 * copy each program instruction begins and ends, so that a signal handler reads the
 * program's pc in its ucontext, never the cache's (the seed of the mapping repository
 * that `tracepad debug` will read). */
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "dbt/rt-priv.h"
#include "rt/raw.h"

#define STUB 0x8000u /* an exit stub: the program is at its target */
#define MARKS 512
#define RECS_SIZE (64ull << 20)
#define INDEX_N (TP_DBT_CHUNK_SIZE / 16) /* blocks are 16-aligned */

/* One block: cache and program addresses, then its marks (cache offset, program offset or
 * STUB), in cache order. */
struct rec {
	uint64_t cache, pc;
	uint32_t len, n;
	uint16_t mark[][2];
};

/* The records of one chunk, in cache order (the chunk is filled upwards). */
struct area {
	uint64_t rx;
	uint32_t *index; /* offsets of the records in recs */
	uint8_t *recs;
	uint64_t nrec, used;
};

static struct {
	struct area areas[TP_DBT_CHUNKS];
	int nareas;
	uint16_t marks[MARKS][2];
	uint32_t n;
} M;

void tp_dbt_map_begin(void)
{
	M.n = 0;
}

void tp_dbt_map_mark(size_t cache_off, uint64_t prog_off, int stub)
{
	if (M.n && M.marks[M.n - 1][0] == cache_off)
		M.n--; /* nothing was written since the last mark: the later one holds */
	if (M.n < MARKS && cache_off < 0x10000 && prog_off < STUB) {
		M.marks[M.n][0] = (uint16_t)cache_off;
		M.marks[M.n][1] = (uint16_t)(stub ? STUB : prog_off);
		M.n++;
	}
}

static struct area *area_of(uint64_t pc)
{
	int n = __atomic_load_n(&M.nareas, __ATOMIC_ACQUIRE);

	for (int i = 0; i < n; i++)
		if (pc - M.areas[i].rx < TP_DBT_CHUNK_SIZE)
			return &M.areas[i];
	return NULL;
}

void tp_dbt_map_commit(uint64_t chunk, uint64_t cache, size_t len, uint64_t pc)
{
	struct area *a = area_of(chunk);
	size_t size = sizeof(struct rec) + M.n * sizeof(M.marks[0]);
	struct rec *r;

	if (!a && M.nareas < TP_DBT_CHUNKS) {
		long idx = tp_raw6(SYS_mmap, 0, INDEX_N * 4, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		long recs = tp_raw6(SYS_mmap, 0, RECS_SIZE, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (tp_raw_failed(idx) || tp_raw_failed(recs))
			return; /* handlers of this chunk's code see cache addresses */
		a = &M.areas[M.nareas];
		a->rx = chunk;
		a->index = (uint32_t *)(uintptr_t)idx;
		a->recs = (uint8_t *)(uintptr_t)recs;
		__atomic_store_n(&M.nareas, M.nareas + 1, __ATOMIC_RELEASE);
	}
	size = (size + 7) & ~(size_t)7;
	if (!a || a->nrec >= INDEX_N || a->used + size > RECS_SIZE)
		return;
	r = (struct rec *)(a->recs + a->used);
	r->cache = cache;
	r->pc = pc;
	r->len = (uint32_t)len;
	r->n = M.n;
	memcpy(r->mark, M.marks, M.n * sizeof(M.marks[0]));
	a->index[a->nrec] = (uint32_t)a->used;
	a->used += size;
	/* a signal handler of another thread may be searching meanwhile */
	__atomic_store_n(&a->nrec, a->nrec + 1, __ATOMIC_RELEASE);
}

void tp_dbt_map_reset(uint64_t chunk)
{
	struct area *a = area_of(chunk);

	if (a) {
		__atomic_store_n(&a->nrec, 0, __ATOMIC_RELEASE);
		a->used = 0;
	}
}

uint64_t tp_dbt_map_program_pc(uint64_t cpc)
{
	struct area *a = area_of(cpc);
	uint64_t lo = 0, hi, rel, target;
	const struct rec *r;
	uint32_t i;

	if (!a)
		return 0;
	hi = __atomic_load_n(&a->nrec, __ATOMIC_ACQUIRE);
	/* the last record that starts at or below cpc */
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (((const struct rec *)(a->recs + a->index[mid]))->cache <= cpc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return 0;
	r = (const struct rec *)(a->recs + a->index[lo - 1]);
	rel = cpc - r->cache;
	if (rel >= r->len || !r->n)
		return 0;
	for (i = 0; i + 1 < r->n && r->mark[i + 1][0] <= rel; i++)
		;
	if (r->mark[i][1] != STUB)
		return r->pc + r->mark[i][1];
	memcpy(&target, (const void *)(uintptr_t)(r->cache + r->mark[i][0] + TP_DBT_STUB_TARGET),
	       8);
	return target;
}
