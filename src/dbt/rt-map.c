/* The mapping and breakpoint repositories, the runtime's side (layout: map-abi.h): for each
 * translated block, where in its copy each program instruction's code begins and which
 * code is hidden, in a memfd a tracer maps too; signal handlers read program pcs through it,
 * and breakpoints a tracer set are planted into every new copy of their instruction. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "dbt/map-abi.h"
#include "dbt/rt-priv.h"
#include "rt/raw.h"

#define MARKS 512
#define INT3 0xcc

/* The runtime's own copy of what it publishes in an area: a tracer writes the shared
 * memory too (breakpoints), so nothing the lookups trust is read back from there. */
struct area {
	uint64_t rx, rw;
	uint32_t *index;
	uint8_t *recs;
	uint64_t nrec, used;
	uint64_t index_in, recs_in; /* bytes of each faulted in ahead (tp_dbt_populate) */
	struct tp_dbt_map_area *pub;
};

static struct {
	struct tp_dbt_map_head *head;
	struct tp_dbt_map_bp *bps;
	int fd;
	uint64_t ino; /* the memfd's, to know the fd still names it */
	int ready;    /* 1: mapped, -1: could not be */
	struct area areas[TP_DBT_MAP_AREAS];
	int nareas;
	struct tp_dbt_map_mark marks[MARKS];
	uint32_t n;
} M;

static void head_init(struct tp_dbt_map_head *h)
{
	h->magic = TP_DBT_MAP_MAGIC;
	h->version = TP_DBT_MAP_VERSION;
	h->head_size = sizeof(*h);
	h->size = TP_DBT_MAP_SIZE;
	h->at = TP_DBT_MAP_AT;
	h->pid = (int32_t)tp_raw0(SYS_getpid);
	h->rt_lo = TP_DBT_RT_AT;
	h->rt_hi = TP_DBT_HEAP_AT;
	h->bp_slots = TP_DBT_MAP_BPS;
	h->areas_off = 4096;
	h->bps_off = h->areas_off + TP_DBT_MAP_AREAS * sizeof(struct tp_dbt_map_area);
}

/* A memfd of the repositories' size at @at; its fd moved high, out of the program's way
 * (it keeps it open so that a tracer finds it in /proc/PID/fd). */
static long map_file(uint64_t at, long *fdp)
{
	static const int high[] = {1000, 400, 200, 100};
	long fd = tp_raw2(SYS_memfd_create, TP_DBT_MAP_NAME, MFD_CLOEXEC), r = -EBADF;

	if (fd < 0)
		return fd;
	if (!tp_raw2(SYS_ftruncate, fd, TP_DBT_MAP_SIZE))
		r = tp_raw6(SYS_mmap, at, TP_DBT_MAP_SIZE, PROT_READ | PROT_WRITE,
			    MAP_SHARED | (at ? MAP_FIXED_NOREPLACE : 0), fd, 0);
	if (tp_raw_failed(r)) {
		tp_raw1(SYS_close, fd);
		return r;
	}
	for (size_t i = 0; i < sizeof(high) / sizeof(high[0]); i++) {
		long hi = tp_raw3(SYS_fcntl, fd, F_DUPFD_CLOEXEC, high[i]);

		if (hi >= 0) {
			tp_raw1(SYS_close, fd);
			fd = hi;
			break;
		}
	}
	*fdp = fd;
	return r;
}

static uint64_t fd_ino(long fd)
{
	struct stat st;

	return fd >= 0 && !tp_raw2(SYS_fstat, fd, &st) ? (uint64_t)st.st_ino : 0;
}

static int map_init(void)
{
	long fd = -1, at;

	if (M.ready)
		return M.ready > 0;
	at = tp_dbt.boot->flags & TP_DBT_BOOT_UNPUBLISHED ? -EPERM : map_file(TP_DBT_MAP_AT, &fd);
	if (tp_raw_failed(at)) {
		/* still the signal handlers' map, only not shared */
		at = tp_raw6(SYS_mmap, TP_DBT_MAP_AT, TP_DBT_MAP_SIZE, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1,
			     0);
		if (tp_raw_failed(at)) {
			M.ready = -1;
			return 0;
		}
	}
	M.fd = (int)fd;
	M.ino = fd_ino(fd);
	M.head = (struct tp_dbt_map_head *)(uintptr_t)at;
	head_init(M.head);
	M.bps = (struct tp_dbt_map_bp *)(uintptr_t)(at + M.head->bps_off);
	if (tp_dbt.boot->flags & TP_DBT_BOOT_BREAK_ENTRY) {
		/* the debugger that launched the program takes it at its first instruction:
		 * the first block gets the int3 like any other (it removes it then) */
		uint64_t pc = tp_dbt.boot->regs.rip;
		struct tp_dbt_map_bp *b = &M.bps[tp_dbt_map_bp_hash(pc, TP_DBT_MAP_BPS)];

		b->pc = pc;
		b->orig = *(const uint8_t *)(uintptr_t)pc;
		b->state = TP_DBT_BP_SET;
		M.head->nbps = 1;
	}
	M.ready = 1;
	return 1;
}

void tp_dbt_map_begin(void)
{
	M.n = 0;
}

void tp_dbt_map_mark(size_t cache_off, uint64_t prog_off, int kind)
{
	if (M.n && M.marks[M.n - 1].cache_off == cache_off)
		M.n--; /* nothing was written since the last mark: the later one holds */
	if (M.n < MARKS && cache_off < 0x10000 && prog_off <= TP_DBT_MK_OFF) {
		struct tp_dbt_map_mark *m = &M.marks[M.n++];

		m->cache_off = (uint16_t)cache_off;
		m->prog = (uint16_t)((unsigned)kind << TP_DBT_MK_SHIFT |
				     (kind == TP_DBT_MK_STUB ? 0 : prog_off));
		m->byte = 0;
		m->len = 0;
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

static struct area *area_new(uint64_t rx, uint64_t rw)
{
	struct area *a;
	int i = M.nareas;

	if (i == TP_DBT_MAP_AREAS || !map_init())
		return NULL;
	a = &M.areas[i];
	a->rx = rx;
	a->rw = rw;
	a->index = (uint32_t *)(uintptr_t)(TP_DBT_MAP_AT + TP_DBT_MAP_INDEX_OFF(i));
	a->recs = (uint8_t *)(uintptr_t)(TP_DBT_MAP_AT + TP_DBT_MAP_RECS_OFF(i));
	a->pub = (struct tp_dbt_map_area *)(uintptr_t)(TP_DBT_MAP_AT + M.head->areas_off) + i;
	a->pub->rx = rx;
	a->pub->rw = rw;
	a->pub->size = TP_DBT_CHUNK_SIZE;
	__atomic_store_n(&M.nareas, i + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&M.head->nareas, (uint32_t)i + 1, __ATOMIC_RELEASE);
	return a;
}

/* The breakpoint a tracer set at @pc, NULL when none; slots are read as the tracer writes
 * them, and the probe is bounded whatever they hold. */
static const struct tp_dbt_map_bp *bp_find(uint64_t pc)
{
	uint64_t i = tp_dbt_map_bp_hash(pc, TP_DBT_MAP_BPS);

	for (int k = 0; k < TP_DBT_MAP_BPS; k++, i = (i + 1) & (TP_DBT_MAP_BPS - 1)) {
		const struct tp_dbt_map_bp *b = &M.bps[i];
		uint8_t st = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);

		if (st == TP_DBT_BP_FREE)
			return NULL;
		if (st == TP_DBT_BP_SET && b->pc == pc)
			return b;
	}
	return NULL;
}

void tp_dbt_map_unbreak(uint64_t pc, uint8_t *code, size_t n)
{
	if (M.ready <= 0 || !__atomic_load_n(&M.head->nbps, __ATOMIC_ACQUIRE))
		return;
	/* a debugger may have written its int3 into the program's text: the instruction is
	 * translated from the byte it hides */
	for (size_t i = 0; i < n; i++) {
		const struct tp_dbt_map_bp *b = bp_find(pc + i);

		if (b && code[i] == INT3)
			code[i] = b->orig;
	}
}

/* Every site of @r as the breakpoints say: an int3, or the byte translated.  A tracer may
 * be changing them meanwhile (bp_seq odd): passes are made until none overlapped one. */
static void bp_plant(const struct area *a, uint64_t cache, uint64_t pc)
{
	static uint32_t dead_seq; /* the (odd) word as a tracer that died left it */
	struct tp_dbt_map_head *h = M.head;
	uint8_t *code = (uint8_t *)(uintptr_t)(a->rw + (cache - a->rx));

	/* the record is published: from here a tracer that begins sees it, or we see it */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (int pass = 0, spins = 0;; pass++) {
		uint32_t s1 = __atomic_load_n(&h->bp_seq, __ATOMIC_ACQUIRE), s2;
		int dead = 0;

		if (s1 & 1) {
			/* a tracer killed in the middle must not hold the program up */
			if (s1 == dead_seq ||
			    (++spins % 256 == 0 &&
			     tp_raw2(SYS_kill, __atomic_load_n(&h->bp_writer, __ATOMIC_RELAXED),
				     0) == -ESRCH)) {
				dead = 1;
				dead_seq = s1;
			} else {
				tp_raw0(SYS_sched_yield);
				continue;
			}
		}
		if (!pass && !__atomic_load_n(&h->nbps, __ATOMIC_ACQUIRE) && !dead)
			goto check;
		/* the marks as this runtime wrote them, not as the shared record now says */
		for (uint32_t i = 0; i < M.n; i++) {
			const struct tp_dbt_map_mark *m = &M.marks[i];
			uint8_t want;

			if (m->prog >> TP_DBT_MK_SHIFT != TP_DBT_MK_INSN)
				continue;
			want = bp_find(pc + (m->prog & TP_DBT_MK_OFF)) ? INT3 : m->byte;
			if (code[m->cache_off] != want)
				__atomic_store_n(&code[m->cache_off], want, __ATOMIC_RELEASE);
		}
		if (dead)
			return;
	check:
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		s2 = __atomic_load_n(&h->bp_seq, __ATOMIC_ACQUIRE);
		if (s1 == s2)
			return;
	}
}

/* @need bytes from @base are about to be written: fault them in, and a step more. */
static void ahead(uint8_t *base, uint64_t *in, uint64_t need, uint64_t cap)
{
	uint64_t to = need + tp_dbt_populate_step(*in);

	if (need <= *in)
		return;
	if (to > cap)
		to = cap;
	tp_dbt_populate((uint64_t)(uintptr_t)base + *in, to - *in, 1);
	*in = to;
}

void tp_dbt_map_commit(uint64_t chunk, uint64_t chunk_rw, uint64_t cache, size_t len, uint64_t pc,
		       uint64_t end)
{
	struct area *a = area_of(chunk);
	size_t size = sizeof(struct tp_dbt_map_rec) + M.n * sizeof(M.marks[0]);
	const uint8_t *code = (const uint8_t *)(uintptr_t)(chunk_rw + (cache - chunk));
	struct tp_dbt_map_rec *r;
	uint64_t next = end - pc;

	if (!a && !(a = area_new(chunk, chunk_rw)))
		return; /* handlers of this chunk's code see cache addresses */
	tp_dbt_map_chunk(chunk, chunk_rw);
	size = (size + 7) & ~(size_t)7;
	if (a->nrec >= TP_DBT_MAP_INDEX_CAP || a->used + size > TP_DBT_MAP_RECS_CAP)
		return;
	ahead(a->recs, &a->recs_in, a->used + size, TP_DBT_MAP_RECS_CAP);
	ahead((uint8_t *)a->index, &a->index_in, (a->nrec + 1) * 4, TP_DBT_MAP_INDEX_CAP * 4ull);
	/* an instruction ends where the next one begins, the last one at the block's end */
	for (uint32_t i = M.n; i-- > 0;) {
		struct tp_dbt_map_mark *m = &M.marks[i];
		uint64_t off = m->prog & TP_DBT_MK_OFF;

		if (m->prog >> TP_DBT_MK_SHIFT != TP_DBT_MK_INSN)
			continue;
		m->byte = m->cache_off < len ? code[m->cache_off] : 0;
		m->len = (uint8_t)(next > off ? next - off : 0);
		next = off;
	}
	r = (struct tp_dbt_map_rec *)(a->recs + a->used);
	r->cache = cache;
	r->pc = pc;
	r->len = (uint32_t)len;
	r->n = M.n;
	r->flags = 0;
	memcpy(r->mark, M.marks, M.n * sizeof(M.marks[0]));
	a->index[a->nrec] = (uint32_t)a->used;
	a->used += size;
	/* a signal handler of another thread, or a tracer, may be searching meanwhile */
	__atomic_store_n(&a->nrec, a->nrec + 1, __ATOMIC_RELEASE);
	a->pub->used = a->used;
	__atomic_store_n(&a->pub->nrec, a->nrec, __ATOMIC_RELEASE);
	__atomic_add_fetch(&M.head->gen, 1, __ATOMIC_RELEASE);
	if (M.fd >= 0)
		bp_plant(a, cache, pc);
}

static const struct tp_dbt_map_rec *rec_at(const struct area *a, uint64_t i)
{
	uint32_t off = a->index[i];

	return off < a->used ? (const struct tp_dbt_map_rec *)(a->recs + off) : NULL;
}

uint64_t tp_dbt_map_program_pc(uint64_t cpc)
{
	struct area *a = area_of(cpc);
	uint64_t lo = 0, hi, rel, target;
	const struct tp_dbt_map_rec *r;
	const struct tp_dbt_map_mark *m;
	uint32_t i;

	if (!a)
		return 0;
	hi = __atomic_load_n(&a->nrec, __ATOMIC_ACQUIRE);
	/* the last record that starts at or below cpc */
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (!(r = rec_at(a, mid)))
			return 0;
		if (r->cache <= cpc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || !(r = rec_at(a, lo - 1)))
		return 0;
	rel = cpc - r->cache;
	if (rel >= r->len || !r->n || r->n > MARKS)
		return 0;
	for (i = 0; i + 1 < r->n && r->mark[i + 1].cache_off <= rel; i++)
		;
	m = &r->mark[i];
	if (m->prog >> TP_DBT_MK_SHIFT == TP_DBT_MK_STUB) {
		memcpy(&target,
		       (const void *)(uintptr_t)(r->cache + m->cache_off + TP_DBT_STUB_TARGET), 8);
		return target;
	}
	/* after the int3 at a site (a breakpoint, or the program's own), natively the pc is
	 * one byte further in the program */
	if (m->prog >> TP_DBT_MK_SHIFT == TP_DBT_MK_INSN && rel == m->cache_off + 1u &&
	    *(const uint8_t *)(uintptr_t)(r->cache + m->cache_off) == INT3)
		return r->pc + (m->prog & TP_DBT_MK_OFF) + 1;
	return r->pc + (m->prog & TP_DBT_MK_OFF);
}

int tp_dbt_map_rewound(uint64_t cpc, uint64_t shown, uint64_t pc)
{
	struct area *a = area_of(cpc - 1);
	uint64_t lo = 0, hi;
	const struct tp_dbt_map_rec *r;

	if (!a || shown != pc + 1)
		return 0;
	hi = __atomic_load_n(&a->nrec, __ATOMIC_ACQUIRE);
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (!(r = rec_at(a, mid)))
			return 0;
		if (r->cache <= cpc - 1)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || !(r = rec_at(a, lo - 1)) || cpc - 1 - r->cache >= r->len || r->n > MARKS)
		return 0;
	/* cpc - 1 is where the code of the instruction at pc begins */
	for (uint32_t i = 0; i < r->n; i++)
		if (r->mark[i].cache_off == cpc - 1 - r->cache &&
		    r->mark[i].prog >> TP_DBT_MK_SHIFT == TP_DBT_MK_INSN &&
		    r->pc + (r->mark[i].prog & TP_DBT_MK_OFF) == pc)
			return 1;
	return 0;
}

void tp_dbt_map_stale(uint64_t start, uint64_t end)
{
	int marked = 0;

	for (int k = 0; k < M.nareas; k++) {
		const struct area *a = &M.areas[k];

		for (uint64_t i = 0; i < a->nrec; i++) {
			struct tp_dbt_map_rec *r = (struct tp_dbt_map_rec *)rec_at(a, i);
			uint64_t last =
			    r && r->n ? r->pc + (r->mark[r->n - 1].prog & TP_DBT_MK_OFF) : 0;

			/* a block's program code ends before its last mark's offset + 16 */
			if (!r || r->pc >= end || last + 16 <= start)
				continue;
			__atomic_or_fetch(&r->flags, TP_DBT_REC_STALE, __ATOMIC_RELEASE);
			marked = 1;
		}
	}
	if (marked)
		__atomic_add_fetch(&M.head->gen, 1, __ATOMIC_RELEASE);
}

void tp_dbt_map_chunk(uint64_t chunk, uint64_t chunk_rw)
{
	struct area *a = area_of(chunk);

	/* a forked child writes its own copy of the chunk, at another address */
	if (a && a->rw != chunk_rw)
		a->rw = a->pub->rw = chunk_rw;
}

void tp_dbt_map_reset(uint64_t chunk)
{
	struct area *a = area_of(chunk);

	if (!a)
		return;
	__atomic_add_fetch(&a->pub->epoch, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&a->nrec, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&a->pub->nrec, 0, __ATOMIC_RELEASE);
	a->used = a->pub->used = 0;
	__atomic_add_fetch(&a->pub->epoch, 1, __ATOMIC_ACQ_REL);
	__atomic_add_fetch(&M.head->gen, 1, __ATOMIC_RELEASE);
}

void tp_dbt_map_unbreak_all(void)
{
	/* gdb takes its breakpoints out of a fork child it detaches (the default follow-fork
	 * mode) by writing the text, which the cache never runs: the int3s of this copy go */
	if (M.ready <= 0 || !M.head->nbps)
		return;
	for (int k = 0; k < M.nareas; k++) {
		const struct area *a = &M.areas[k];

		for (uint64_t i = 0; i < a->nrec; i++) {
			const struct tp_dbt_map_rec *r = rec_at(a, i);
			uint8_t *code;

			if (!r || r->cache - a->rx >= TP_DBT_CHUNK_SIZE ||
			    r->len > TP_DBT_CHUNK_SIZE - (r->cache - a->rx))
				continue;
			code = (uint8_t *)(uintptr_t)(a->rw + (r->cache - a->rx));
			for (uint32_t j = 0; j < r->n && j < MARKS; j++) {
				const struct tp_dbt_map_mark *m = &r->mark[j];

				if (m->prog >> TP_DBT_MK_SHIFT == TP_DBT_MK_INSN &&
				    m->cache_off < r->len && code[m->cache_off] == INT3 &&
				    m->byte != INT3)
					__atomic_store_n(&code[m->cache_off], m->byte,
							 __ATOMIC_RELEASE);
			}
		}
	}
	for (uint32_t i = 0; i < TP_DBT_MAP_BPS; i++)
		M.bps[i].state = TP_DBT_BP_FREE;
	M.head->nbps = 0;
}

void tp_dbt_map_break(uint64_t pc)
{
	uint64_t i = tp_dbt_map_bp_hash(pc, TP_DBT_MAP_BPS);
	struct tp_dbt_map_bp *slot = NULL;

	if (M.ready <= 0 || !pc)
		return;
	for (int k = 0; k < TP_DBT_MAP_BPS; k++, i = (i + 1) & (TP_DBT_MAP_BPS - 1)) {
		struct tp_dbt_map_bp *b = &M.bps[i];

		if (b->state == TP_DBT_BP_SET && b->pc == pc)
			return; /* the debugger's own: the trap is the same */
		if (b->state != TP_DBT_BP_SET && !slot)
			slot = b;
		if (b->state == TP_DBT_BP_FREE)
			break;
	}
	if (!slot)
		return;
	slot->pc = pc;
	slot->orig = *(const uint8_t *)(uintptr_t)pc;
	__atomic_store_n(&slot->state, TP_DBT_BP_SET, __ATOMIC_RELEASE);
	__atomic_add_fetch(&M.head->nbps, 1, __ATOMIC_SEQ_CST);
	/* the copies translated already; later ones get it as they are translated */
	for (int k = 0; k < M.nareas; k++) {
		const struct area *a = &M.areas[k];

		for (uint64_t j = 0; j < a->nrec; j++) {
			const struct tp_dbt_map_rec *r = rec_at(a, j);

			if (!r || r->cache - a->rx >= TP_DBT_CHUNK_SIZE ||
			    r->len > TP_DBT_CHUNK_SIZE - (r->cache - a->rx) || r->pc > pc ||
			    (r->flags & TP_DBT_REC_STALE))
				continue;
			for (uint32_t n = 0; n < r->n && n < MARKS; n++) {
				const struct tp_dbt_map_mark *m = &r->mark[n];

				if (m->prog >> TP_DBT_MK_SHIFT == TP_DBT_MK_INSN &&
				    r->pc + (m->prog & TP_DBT_MK_OFF) == pc &&
				    m->cache_off < r->len)
					__atomic_store_n((uint8_t *)(uintptr_t)(a->rw +
										(r->cache - a->rx) +
										m->cache_off),
							 INT3, __ATOMIC_RELEASE);
			}
		}
	}
}

void tp_dbt_map_forked(void)
{
	uint8_t *old = (uint8_t *)(uintptr_t)TP_DBT_MAP_AT, *copy;
	long fd = -1, at, moved;

	if (M.ready <= 0 || M.fd < 0)
		return; /* a private map: the fork copied it */
	/* a copy of the parent's repositories, then the copy mapped over them: the child's
	 * translations must not land in its parent's */
	at = map_file(0, &fd);
	if (tp_raw_failed(at)) {
		M.ready = -1; /* the parent's must not be written: no more records here */
		__atomic_store_n(&M.nareas, 0, __ATOMIC_RELEASE);
		return;
	}
	copy = (uint8_t *)(uintptr_t)at;
	memcpy(copy, old, TP_DBT_MAP_HEAD_SIZE);
	for (int k = 0; k < M.nareas; k++) {
		M.areas[k].index_in = M.areas[k].recs_in = 0; /* a new file */
		memcpy(copy + TP_DBT_MAP_INDEX_OFF(k), old + TP_DBT_MAP_INDEX_OFF(k),
		       M.areas[k].nrec * 4);
		memcpy(copy + TP_DBT_MAP_RECS_OFF(k), old + TP_DBT_MAP_RECS_OFF(k),
		       M.areas[k].used);
	}
	moved = tp_raw6(SYS_mmap, TP_DBT_MAP_AT, TP_DBT_MAP_SIZE, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_FIXED, fd, 0);
	tp_raw2(SYS_munmap, at, TP_DBT_MAP_SIZE);
	if (tp_raw_failed(moved)) {
		tp_raw1(SYS_close, fd);
		M.ready = -1;
		__atomic_store_n(&M.nareas, 0, __ATOMIC_RELEASE);
		return;
	}
	/* the child's fd of the same number names its own copy, unless the program closed
	 * the parent's and the number is one of its files now */
	if (fd_ino(M.fd) == M.ino && tp_raw3(SYS_dup3, fd, M.fd, O_CLOEXEC) >= 0) {
		tp_raw1(SYS_close, fd);
	} else {
		M.fd = (int)fd;
	}
	M.ino = fd_ino(M.fd);
	M.head->pid = (int32_t)tp_raw0(SYS_getpid);
	M.head->bp_seq &= ~1u; /* a writer of the parent's is not ours */
}
