/* The tracer's side of the code cache's repositories (map.h): the memfd is mapped here
 * too; records are read in place, checked against the mapping's bounds (the program
 * writes them: nothing it wrote is trusted), and code is patched through /proc/PID/mem at
 * each chunk's writable view, under the breakpoint sequence word (map-abi.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/hash.h"
#include "dbt/map-abi.h"
#include "dbt/map.h"
#include "proc/proc.h"

#define INT3 0xcc

/* One instruction's code in the cache, for the index by program address. */
struct site {
	uint32_t area, rec; /* the record: its area and offset */
	uint32_t mark;
	uint32_t next; /* the next site of the same program address + 1, 0 at the end */
};

struct tp_dbt_map {
	pid_t pid;
	int mem; /* /proc/PID/mem */
	uint8_t *base;
	struct tp_dbt_map_head *head;
	struct tp_dbt_map_area *areas;
	struct tp_dbt_map_bp *bps;
	/* program address -> its sites (index + 1 of the newest), grown as records come */
	struct tp_hash index;
	struct site *sites;
	size_t nsites, cap;
	uint64_t done[TP_DBT_MAP_AREAS]; /* records indexed, by area */
	uint32_t epoch[TP_DBT_MAP_AREAS];
};

uint64_t tp_dbt_map_generation(const struct tp_dbt_map *m)
{
	return __atomic_load_n(&m->head->gen, __ATOMIC_ACQUIRE);
}

int tp_dbt_map_open_fd(pid_t pid, int fd, struct tp_dbt_map **out)
{
	struct tp_dbt_map *m = calloc(1, sizeof(*m));
	struct stat st;
	char path[64];
	void *at;
	int err;

	if (!m)
		return -ENOMEM;
	m->mem = -1;
	/* a smaller file would fault where its end is read */
	err = -EPROTO;
	if (fstat(fd, &st) || (uint64_t)st.st_size < TP_DBT_MAP_SIZE)
		goto err_free;
	at = mmap(NULL, TP_DBT_MAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (at == MAP_FAILED) {
		err = -errno;
		goto err_free;
	}
	m->base = at;
	m->head = at;
	err = -EPROTO;
	if (m->head->magic != TP_DBT_MAP_MAGIC || m->head->version != TP_DBT_MAP_VERSION ||
	    m->head->size != TP_DBT_MAP_SIZE || m->head->bp_slots != TP_DBT_MAP_BPS ||
	    m->head->areas_off + TP_DBT_MAP_AREAS * sizeof(struct tp_dbt_map_area) >
		m->head->bps_off ||
	    m->head->bps_off + TP_DBT_MAP_BPS * sizeof(struct tp_dbt_map_bp) > TP_DBT_MAP_HEAD_SIZE)
		goto err_unmap;
	/* a forked child that has not made its own copy yet still shows its parent's */
	err = -EAGAIN;
	if (m->head->pid != pid && m->head->pid != tp_proc_tgid(pid))
		goto err_unmap;
	pid = m->head->pid; /* a thread's process */
	m->areas = (void *)(m->base + m->head->areas_off);
	m->bps = (void *)(m->base + m->head->bps_off);
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	m->mem = open(path, O_RDWR | O_CLOEXEC);
	if (m->mem < 0)
		m->mem = open(path, O_RDONLY | O_CLOEXEC); /* mapping works; breakpoints do not */
	if (m->mem < 0) {
		err = -errno;
		goto err_unmap;
	}
	m->pid = pid;
	*out = m;
	return 0;
err_unmap:
	munmap(m->base, TP_DBT_MAP_SIZE);
err_free:
	free(m);
	return err;
}

int tp_dbt_map_open(pid_t pid, struct tp_dbt_map **out)
{
	static const char want[] = "/memfd:" TP_DBT_MAP_NAME;
	char dir[64], path[320], link[256];
	struct dirent *d;
	int err = -ENOENT;
	DIR *dp;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	dp = opendir(dir);
	if (!dp)
		return -errno;
	while (err && (d = readdir(dp))) {
		ssize_t n;
		int fd;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n < (ssize_t)sizeof(want) - 1 || memcmp(link, want, sizeof(want) - 1))
			continue;
		link[n] = 0;
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		err = tp_dbt_map_open_fd(pid, fd, out);
		close(fd);
	}
	closedir(dp);
	return err;
}

void tp_dbt_map_close(struct tp_dbt_map *m)
{
	if (!m)
		return;
	if (m->mem >= 0)
		close(m->mem);
	munmap(m->base, TP_DBT_MAP_SIZE);
	tp_hash_release(&m->index);
	free(m->sites);
	free(m);
}

/* ---- records ---- */

/* One area's records as they are now: its epoch (odd: being reset), count and bytes. */
struct view {
	const struct tp_dbt_map_area *pub;
	const uint32_t *index;
	const uint8_t *recs;
	uint64_t rx, rw, nrec, used;
	uint32_t epoch;
};

static int view_get(struct tp_dbt_map *m, uint32_t k, struct view *v)
{
	v->pub = &m->areas[k];
	v->epoch = __atomic_load_n(&v->pub->epoch, __ATOMIC_ACQUIRE);
	if (v->epoch & 1)
		return -EAGAIN;
	v->nrec = __atomic_load_n(&v->pub->nrec, __ATOMIC_ACQUIRE);
	v->used = __atomic_load_n(&v->pub->used, __ATOMIC_ACQUIRE);
	v->rx = v->pub->rx;
	v->rw = v->pub->rw;
	if (v->nrec > TP_DBT_MAP_INDEX_CAP || v->used > TP_DBT_MAP_RECS_CAP)
		return -EPROTO;
	v->index = (const uint32_t *)(m->base + TP_DBT_MAP_INDEX_OFF(k));
	v->recs = m->base + TP_DBT_MAP_RECS_OFF(k);
	return 0;
}

static int view_same(const struct view *v)
{
	return __atomic_load_n(&v->pub->epoch, __ATOMIC_ACQUIRE) == v->epoch;
}

/* Record @i of @v, NULL when it does not fit in what was published. */
static const struct tp_dbt_map_rec *view_rec(const struct view *v, uint64_t i)
{
	uint64_t off = v->index[i];
	const struct tp_dbt_map_rec *r;

	if (off + sizeof(*r) > v->used)
		return NULL;
	r = (const void *)(v->recs + off);
	if (r->n == 0 || off + sizeof(*r) + (uint64_t)r->n * sizeof(r->mark[0]) > v->used)
		return NULL;
	return r;
}

static uint32_t nareas(struct tp_dbt_map *m)
{
	uint32_t n = __atomic_load_n(&m->head->nareas, __ATOMIC_ACQUIRE);

	return n > TP_DBT_MAP_AREAS ? TP_DBT_MAP_AREAS : n;
}

static int index_add(struct tp_dbt_map *m, uint64_t pc, uint32_t k, uint32_t rec, uint32_t mark)
{
	uint64_t *head = tp_hash_get(&m->index, pc);
	struct site *st;

	if (m->nsites == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 4096;
		struct site *n = realloc(m->sites, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		m->sites = n;
		m->cap = cap;
	}
	st = &m->sites[m->nsites];
	st->area = k;
	st->rec = rec;
	st->mark = mark;
	st->next = head ? (uint32_t)*head : 0;
	if (tp_hash_put(&m->index, pc, m->nsites + 1))
		return -ENOMEM;
	m->nsites++;
	return 0;
}

/* Index the records published since the last call (records are never changed but for
 * flags; an area that was emptied since makes the index start over). */
static int index_update(struct tp_dbt_map *m)
{
	for (uint32_t k = 0; k < nareas(m); k++) {
		struct view v;
		int err = view_get(m, k, &v);

		if (err == -EAGAIN)
			continue;
		if (err)
			return err;
		if (v.epoch != m->epoch[k]) {
			tp_hash_release(&m->index);
			m->nsites = 0;
			memset(m->done, 0, sizeof(m->done));
			for (uint32_t j = 0; j < TP_DBT_MAP_AREAS; j++)
				m->epoch[j] = __atomic_load_n(&m->areas[j].epoch, __ATOMIC_ACQUIRE);
			return index_update(m);
		}
		for (; m->done[k] < v.nrec; m->done[k]++) {
			const struct tp_dbt_map_rec *r = view_rec(&v, m->done[k]);

			if (!r)
				return -EPROTO;
			for (uint32_t j = 0; j < r->n; j++) {
				const struct tp_dbt_map_mark *mk = &r->mark[j];

				if (mk->prog >> TP_DBT_MK_SHIFT == TP_DBT_MK_INSN &&
				    (err = index_add(m, r->pc + (mk->prog & TP_DBT_MK_OFF), k,
						     (uint32_t)((const uint8_t *)r - v.recs), j)))
					return err;
			}
		}
	}
	return 0;
}

/* The record of site @st, NULL when its area was emptied since. */
static const struct tp_dbt_map_rec *site_rec(struct tp_dbt_map *m, const struct site *st)
{
	if (__atomic_load_n(&m->areas[st->area].epoch, __ATOMIC_ACQUIRE) != m->epoch[st->area])
		return NULL;
	return (const void *)(m->base + TP_DBT_MAP_RECS_OFF(st->area) + st->rec);
}

static uint64_t read_u64(struct tp_dbt_map *m, uint64_t at)
{
	uint64_t v = 0;

	if (pread(m->mem, &v, 8, (off_t)at) != 8)
		return 0;
	return v;
}

/* Mark @i of @r as a range (end: the next mark or the block's end). */
static void range_of(struct tp_dbt_map *m, const struct tp_dbt_map_rec *r, uint32_t i,
		     struct tp_dbt_range *out)
{
	const struct tp_dbt_map_mark *k = &r->mark[i];
	uint32_t end = i + 1 < r->n ? r->mark[i + 1].cache_off : r->len;
	int kind = k->prog >> TP_DBT_MK_SHIFT;

	out->block = r->cache;
	out->cache = r->cache + k->cache_off;
	out->size = end > k->cache_off ? end - k->cache_off : 0;
	out->pc = r->pc + (k->prog & TP_DBT_MK_OFF);
	out->len = kind == TP_DBT_MK_INSN ? k->len : 0;
	out->stale = !!(__atomic_load_n(&r->flags, __ATOMIC_ACQUIRE) & TP_DBT_REC_STALE);
	out->kind = kind == TP_DBT_MK_INSN     ? TP_DBT_PC_INSN
		    : kind == TP_DBT_MK_HIDDEN ? TP_DBT_PC_HIDDEN
		    : kind == TP_DBT_MK_STUB   ? TP_DBT_PC_STUB
					       : TP_DBT_PC_LOOKUP;
	if (kind == TP_DBT_MK_STUB)
		out->pc = read_u64(m, out->cache + TP_DBT_STUB_TARGET);
}

int tp_dbt_map_foreach(struct tp_dbt_map *m, int (*fn)(const struct tp_dbt_range *r, void *arg),
		       void *arg)
{
	for (uint32_t k = 0; k < nareas(m); k++) {
		struct view v;
		int err = view_get(m, k, &v);

		if (err == -EAGAIN)
			continue; /* being emptied: nothing in it to report */
		if (err)
			return err;
		for (uint64_t i = 0; i < v.nrec && view_same(&v); i++) {
			const struct tp_dbt_map_rec *r = view_rec(&v, i);

			if (!r)
				return -EPROTO;
			for (uint32_t j = 0; j < r->n; j++) {
				struct tp_dbt_range rg;

				range_of(m, r, j, &rg);
				if ((err = fn(&rg, arg)))
					return err;
			}
		}
	}
	return 0;
}

int tp_dbt_map_to_program(struct tp_dbt_map *m, uint64_t cpc, struct tp_dbt_pc *out)
{
	memset(out, 0, sizeof(*out));
	if (cpc >= m->head->rt_lo && cpc < m->head->rt_hi) {
		out->kind = TP_DBT_PC_RUNTIME;
		return 0;
	}
	for (uint32_t k = 0; k < nareas(m); k++) {
		const struct tp_dbt_map_rec *r = NULL;
		struct tp_dbt_range rg;
		uint64_t lo = 0, hi;
		struct view v;
		uint32_t i;

		if (view_get(m, k, &v) || cpc - v.rx >= m->areas[k].size)
			continue;
		/* the last record that starts at or below cpc (the chunk fills upwards) */
		hi = v.nrec;
		while (lo < hi) {
			uint64_t mid = (lo + hi) / 2;

			if (!(r = view_rec(&v, mid)))
				return -EPROTO;
			if (r->cache <= cpc)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (!lo || !(r = view_rec(&v, lo - 1)) || cpc - r->cache >= r->len)
			return -ENOENT;
		for (i = 0; i + 1 < r->n && r->mark[i + 1].cache_off <= cpc - r->cache; i++)
			;
		range_of(m, r, i, &rg);
		if (!view_same(&v))
			return -EAGAIN;
		out->pc = rg.pc;
		out->stale = rg.stale;
		out->kind = rg.kind;
		if (rg.kind == TP_DBT_PC_INSN) {
			out->site = rg.cache;
			out->len = rg.len;
			if (cpc != rg.cache)
				out->kind = TP_DBT_PC_INSIDE;
		} else if (rg.kind == TP_DBT_PC_HIDDEN && i + 1 < r->n) {
			struct tp_dbt_range next;

			/* where the program goes on, when it is in this block: a place to roll
			 * ahead to */
			range_of(m, r, i + 1, &next);
			if (next.kind == TP_DBT_PC_INSN && next.pc == rg.pc) {
				out->site = next.cache;
				out->len = next.len;
			}
		}
		return 0;
	}
	return -ENOENT;
}

struct copies {
	uint64_t pc;
	struct tp_dbt_copy *out;
	size_t max, n;
};

static int copy_one(const struct tp_dbt_range *r, void *arg)
{
	struct copies *c = arg;

	if (r->kind != TP_DBT_PC_INSN || r->pc != c->pc)
		return 0;
	if (c->n < c->max) {
		c->out[c->n].cache = r->cache;
		c->out[c->n].len = (uint32_t)r->size;
		c->out[c->n].stale = r->stale;
	}
	c->n++;
	return 0;
}

size_t tp_dbt_map_copies(struct tp_dbt_map *m, uint64_t pc, struct tp_dbt_copy *out, size_t max)
{
	struct copies c = {pc, out, max, 0};
	uint64_t *head;

	if (index_update(m)) {
		tp_dbt_map_foreach(m, copy_one, &c); /* no memory for the index: a scan */
		return c.n;
	}
	head = tp_hash_get(&m->index, pc);
	for (uint32_t i = head ? (uint32_t)*head : 0; i; i = m->sites[i - 1].next) {
		const struct site *st = &m->sites[i - 1];
		const struct tp_dbt_map_rec *r = site_rec(m, st);
		struct tp_dbt_range rg;

		if (!r)
			continue;
		range_of(m, r, st->mark, &rg);
		copy_one(&rg, &c);
	}
	return c.n;
}

/* ---- breakpoints ---- */

/* The breakpoint sequence word: odd while this tracer changes breakpoints and the sites
 * they patch; a holder that died is taken over. */
static void bp_lock(struct tp_dbt_map *m)
{
	struct tp_dbt_map_head *h = m->head;
	struct timespec ts = {0, 200 * 1000};

	for (;;) {
		uint32_t s = __atomic_load_n(&h->bp_seq, __ATOMIC_ACQUIRE);

		if (!(s & 1)) {
			if (__atomic_compare_exchange_n(&h->bp_seq, &s, s + 1, 0, __ATOMIC_SEQ_CST,
							__ATOMIC_RELAXED))
				break;
			continue;
		}
		if (kill(__atomic_load_n(&h->bp_writer, __ATOMIC_RELAXED), 0) && errno == ESRCH &&
		    __atomic_compare_exchange_n(&h->bp_seq, &s, s + 2, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			break;
		nanosleep(&ts, NULL);
	}
	__atomic_store_n(&h->bp_writer, (int32_t)getpid(), __ATOMIC_RELAXED);
	/* the runtime publishes a record, then reads the word: from here on, either we see
	 * its record or it sees the word odd and plants after us */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void bp_unlock(struct tp_dbt_map *m)
{
	__atomic_add_fetch(&m->head->bp_seq, 1, __ATOMIC_SEQ_CST);
}

/* The slot of @pc's breakpoint (set or removed), or where a new one goes; -1 when full. */
static long bp_slot(struct tp_dbt_map *m, uint64_t pc, int *found)
{
	uint64_t i = tp_dbt_map_bp_hash(pc, TP_DBT_MAP_BPS);
	long spare = -1;

	*found = 0;
	for (int k = 0; k < TP_DBT_MAP_BPS; k++, i = (i + 1) & (TP_DBT_MAP_BPS - 1)) {
		struct tp_dbt_map_bp *b = &m->bps[i];

		if (b->state == TP_DBT_BP_FREE)
			return spare >= 0 ? spare : (long)i;
		if (b->pc == pc) {
			*found = b->state == TP_DBT_BP_SET;
			return (long)i;
		}
		if (b->state == TP_DBT_BP_GONE && spare < 0)
			spare = (long)i;
	}
	return spare;
}

/* Write @byte at cache address @at through the chunk's writable view. */
static int code_write(struct tp_dbt_map *m, uint64_t at, uint8_t byte)
{
	for (uint32_t k = 0; k < nareas(m); k++) {
		const struct tp_dbt_map_area *a = &m->areas[k];

		if (at - a->rx < a->size) {
			if (pwrite(m->mem, &byte, 1, (off_t)(a->rw + (at - a->rx))) != 1)
				return errno ? -errno : -EIO;
			return 0;
		}
	}
	return -ENOENT;
}

static int code_read(struct tp_dbt_map *m, uint64_t at, uint8_t *byte)
{
	return pread(m->mem, byte, 1, (off_t)at) == 1 ? 0 : -EIO;
}

/* Plant or take back the int3 at every site of one instruction. */
static int bp_patch(struct tp_dbt_map *m, uint64_t pc, int insert)
{
	uint64_t *head;
	int err = index_update(m);

	if (err)
		return err;
	head = tp_hash_get(&m->index, pc);
	for (uint32_t i = head ? (uint32_t)*head : 0; i; i = m->sites[i - 1].next) {
		const struct site *st = &m->sites[i - 1];
		const struct tp_dbt_map_rec *r = site_rec(m, st);
		const struct tp_dbt_map_mark *k;
		uint64_t site;
		int stale, e = 0;
		uint8_t now;

		if (!r)
			continue;
		k = &r->mark[st->mark];
		site = r->cache + k->cache_off;
		stale = !!(__atomic_load_n(&r->flags, __ATOMIC_ACQUIRE) & TP_DBT_REC_STALE);
		if (insert && !stale)
			e = code_write(m, site, INT3);
		else if (!insert && !code_read(m, site, &now) && now != k->byte)
			e = code_write(m, site, k->byte);
		if (e && !err)
			err = e;
	}
	return err;
}

int tp_dbt_map_bp_insert(struct tp_dbt_map *m, uint64_t pc)
{
	struct tp_dbt_map_bp *b;
	int found, err;
	uint8_t orig;
	long i;

	if (pread(m->mem, &orig, 1, (off_t)pc) != 1)
		return errno ? -errno : -EFAULT;
	bp_lock(m);
	i = bp_slot(m, pc, &found);
	if (found || i < 0 || m->head->nbps >= TP_DBT_MAP_BPS / 2) {
		bp_unlock(m);
		return found ? -EEXIST : -ENOSPC;
	}
	b = &m->bps[i];
	b->pc = pc;
	b->orig = orig;
	__atomic_store_n(&b->state, TP_DBT_BP_SET, __ATOMIC_RELEASE);
	__atomic_add_fetch(&m->head->nbps, 1, __ATOMIC_SEQ_CST);
	err = bp_patch(m, pc, 1);
	bp_unlock(m);
	return err;
}

int tp_dbt_map_bp_remove(struct tp_dbt_map *m, uint64_t pc)
{
	int found, err;
	long i;

	bp_lock(m);
	i = bp_slot(m, pc, &found);
	if (!found) {
		bp_unlock(m);
		return -ENOENT;
	}
	__atomic_store_n(&m->bps[i].state, TP_DBT_BP_GONE, __ATOMIC_RELEASE);
	__atomic_sub_fetch(&m->head->nbps, 1, __ATOMIC_SEQ_CST);
	err = bp_patch(m, pc, 0);
	bp_unlock(m);
	return err;
}

int tp_dbt_map_bp_at(struct tp_dbt_map *m, uint64_t pc, uint8_t *orig)
{
	int found;
	long i = bp_slot(m, pc, &found);

	if (found && orig)
		*orig = m->bps[i].orig;
	return found;
}

ssize_t tp_dbt_map_read_text(struct tp_dbt_map *m, uint64_t addr, void *buf, size_t len,
			     int as_written)
{
	ssize_t n = pread(m->mem, buf, len, (off_t)addr);
	uint8_t *p = buf;

	if (n < 0)
		return -errno;
	if (!__atomic_load_n(&m->head->nbps, __ATOMIC_ACQUIRE))
		return n;
	for (uint32_t i = 0; i < TP_DBT_MAP_BPS; i++) {
		const struct tp_dbt_map_bp *b = &m->bps[i];

		if (__atomic_load_n(&b->state, __ATOMIC_ACQUIRE) != TP_DBT_BP_SET ||
		    b->pc - addr >= (uint64_t)n)
			continue;
		p[b->pc - addr] = as_written ? INT3 : b->orig;
	}
	return n;
}
