/* Code written at run time without mprotect (a JIT on RWX pages, self-modifying code): a
 * writable page that blocks were translated from is write-protected in the kernel while its
 * translations live; the program's write faults into the runtime, which drops them, gives
 * the page back the program's protection and lets the write run again. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "base/procfs.h"
#include "dbt/rt-priv.h"
#include "rt/raw.h"

#define PAGES_BITS 16	 /* the page table's size, at most */
#define PAGES_MIN_BITS 8 /* at first: a page of memory */
#define RANGES 1024

enum {
	P_FREE,	   /* empty slot */
	P_UNKNOWN, /* protection not known (never looked up, or the program changed it since) */
	P_RO,	   /* not writable by the program: nothing to guard */
	P_GUARDED, /* writable by the program, write-protected by the runtime */
	P_OPEN,	   /* writable by the program, written since its last translation */
};

struct page {
	uint64_t page;
	uint32_t prot; /* the program's, for P_GUARDED and P_OPEN */
	uint32_t state;
};

/* The program's mappings as /proc/self/maps last said, until the program maps again. */
struct range {
	uint64_t start, end;
	uint32_t prot;
};

static struct {
	struct page *pages; /* open addressing, never shrinks (states change instead) */
	unsigned bits;	    /* of its size, doubled when half full */
	uint64_t npages;
	uint64_t nguarded;
	struct range *ranges;
	int nranges, ranges_ok; /* ranges_ok: S.ranges is all of /proc/self/maps */
	int no_query;		/* the kernel does not answer PROCMAP_QUERY */
	char buf[4096];
} S;

static uint64_t hash(uint64_t page, unsigned bits)
{
	return (page * 0x9e3779b97f4a7c15ull) >> (64 - bits);
}

/* The table at twice its size (the old one stays unused: the heap never frees); -ENOMEM. */
static int grow(void)
{
	struct page *old = S.pages, *t;
	uint64_t n = 1ull << S.bits, mask = (2ull << S.bits) - 1;

	if (S.bits >= PAGES_BITS || !(t = tp_dbt_alloc(sizeof(struct page) << (S.bits + 1))))
		return -ENOMEM;
	for (uint64_t k = 0; k < n; k++) {
		uint64_t i;

		if (old[k].state == P_FREE)
			continue;
		for (i = hash(old[k].page, S.bits + 1); t[i].state != P_FREE; i = (i + 1) & mask)
			;
		t[i] = old[k];
	}
	S.pages = t;
	S.bits++;
	return 0;
}

/* The slot of @page, added (P_UNKNOWN) when @add; NULL when absent or the table is full. */
static struct page *find(uint64_t page, int add)
{
	uint64_t mask;

	if (!S.pages) {
		if (!add)
			return NULL;
		S.bits = PAGES_MIN_BITS;
		S.pages = tp_dbt_alloc(sizeof(struct page) << S.bits);
		S.ranges = tp_dbt_alloc(sizeof(struct range) * RANGES);
		if (!S.pages || !S.ranges) {
			S.pages = NULL;
			return NULL;
		}
	}
	if (add && S.npages >= (1ull << S.bits) / 2)
		grow(); /* full at the largest size: the page is not added */
	mask = (1ull << S.bits) - 1;
	for (uint64_t i = hash(page, S.bits);; i = (i + 1) & mask) {
		struct page *p = &S.pages[i];

		if (p->state != P_FREE && p->page == page)
			return p;
		if (p->state == P_FREE) {
			if (!add || S.npages >= (1ull << S.bits) / 2)
				return NULL;
			S.npages++;
			p->page = page;
			p->state = P_UNKNOWN;
			return p;
		}
	}
}

static int range_add(const char *line, size_t len)
{
	struct tp_maps_ent e;
	struct range *r;

	if (tp_maps_parse_line(line, len, &e) || S.nranges >= RANGES)
		return 0;
	r = &S.ranges[S.nranges++];
	r->start = e.start;
	r->end = e.end;
	r->prot = (e.perms[0] == 'r' ? PROT_READ : 0) | (e.perms[1] == 'w' ? PROT_WRITE : 0) |
		  (e.perms[2] == 'x' ? PROT_EXEC : 0);
	return 0;
}

/* Read /proc/self/maps into S.ranges; -errno. */
static int ranges_read(void)
{
	long fd = tp_raw3(SYS_open, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	size_t have = 0;
	long n;

	if (fd < 0)
		return (int)fd;
	S.nranges = 0;
	while ((n = tp_raw3(SYS_read, fd, S.buf + have, sizeof(S.buf) - have)) > 0) {
		size_t at = 0;

		have += (size_t)n;
		for (size_t i = 0; i < have; i++) {
			if (S.buf[i] != '\n')
				continue;
			range_add(S.buf + at, i - at);
			at = i + 1;
		}
		for (size_t i = at; i < have; i++) /* the partial line to the front */
			S.buf[i - at] = S.buf[i];
		have -= at;
		if (have == sizeof(S.buf))
			have = 0; /* no maps line is that long */
	}
	tp_raw1(SYS_close, fd);
	S.ranges_ok = n == 0;
	return n < 0 ? (int)n : 0;
}

/* PROCMAP_QUERY (Linux 6.11, <linux/fs.h>, not in older headers): the one mapping at an
 * address, without formatting and parsing the whole of /proc/self/maps. */
struct procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define PROCMAP_QUERY_IOC _IOWR('f', 17, struct procmap_query)

/* The mapping at @at into S.ranges: 1, 0 when none is there, -errno when the kernel cannot
 * say (S.no_query set when it does not know the query). */
static int range_query(uint64_t at)
{
	struct procmap_query q = {.size = sizeof(q), .query_addr = at};
	long fd = tp_raw3(SYS_open, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0), err;
	struct range *r;

	if (fd < 0)
		return (int)fd;
	err = tp_raw3(SYS_ioctl, fd, PROCMAP_QUERY_IOC, &q);
	tp_raw1(SYS_close, fd);
	if (err == -ENOENT)
		return 0;
	if (err) {
		S.no_query = 1;
		return (int)err;
	}
	if (S.nranges >= RANGES)
		S.nranges = 0;
	r = &S.ranges[S.nranges++];
	r->start = q.vma_start;
	r->end = q.vma_end;
	/* the query's flags are PROT_READ, PROT_WRITE and PROT_EXEC's bits */
	r->prot = (uint32_t)(q.vma_flags & (PROT_READ | PROT_WRITE | PROT_EXEC));
	return 1;
}

static long range_prot(uint64_t at)
{
	for (int i = 0; i < S.nranges; i++)
		if (at >= S.ranges[i].start && at < S.ranges[i].end)
			return S.ranges[i].prot;
	return -ENOENT;
}

/* The program's protection of @page, or -errno.  S.ranges holds the mappings looked up
 * since the program last mapped (one at a time where the kernel answers PROCMAP_QUERY:
 * reading the whole of /proc/self/maps at each change was 5% of /bin/true's start-up). */
static long prot_of(uint64_t page)
{
	uint64_t at = page << 12;
	long prot = range_prot(at);
	int found;

	if (prot >= 0)
		return prot;
	if (!S.no_query && (found = range_query(at)) >= 0)
		return found ? range_prot(at) : -ENOENT;
	for (int pass = 0; pass < 2; pass++) {
		if (pass || !S.ranges_ok) {
			int err = ranges_read();

			if (err)
				return err;
		}
		if ((prot = range_prot(at)) >= 0)
			return prot;
	}
	return -ENOENT;
}

void tp_dbt_smc_watch(uint64_t page)
{
	struct page *p = find(page, 1);
	long prot;

	if (!p || p->state == P_RO || p->state == P_GUARDED)
		return;
	if (p->state == P_UNKNOWN) {
		prot = prot_of(page);
		if (prot < 0 || !(prot & PROT_WRITE)) {
			p->state = P_RO; /* unknown: as natively, a write there is the program's */
			return;
		}
		p->prot = (uint32_t)prot;
		p->state = P_OPEN;
	}
	/* the runtime's SIGSEGV handler first, so that the first write finds it */
	if (tp_dbt_sig_own_segv())
		return;
	if (!tp_raw3(SYS_mprotect, page << 12, 4096, p->prot & ~(uint32_t)PROT_WRITE)) {
		p->state = P_GUARDED;
		S.nguarded++;
	}
}

/* The program writes into @p: its translations go, its protection comes back. */
static void open_page(struct page *p)
{
	tp_dbt_invalidate(p->page << 12, (p->page + 1) << 12);
	tp_raw3(SYS_mprotect, p->page << 12, 4096, p->prot);
	p->state = P_OPEN;
	S.nguarded--;
}

int tp_dbt_smc_fault(uint64_t addr)
{
	struct page *p = find(addr >> 12, 0);

	if (!p)
		return 0;
	if (p->state == P_GUARDED)
		open_page(p);
	/* P_OPEN: another thread's write opened it meanwhile */
	return p->state == P_OPEN;
}

void tp_dbt_smc_open(uint64_t start, uint64_t len)
{
	if (!S.nguarded || !len || start + len < start)
		return;
	for (uint64_t pg = start >> 12; pg <= (start + len - 1) >> 12 && S.nguarded; pg++) {
		struct page *p = find(pg, 0);

		if (p && p->state == P_GUARDED)
			open_page(p);
	}
}

void tp_dbt_smc_open_args(const uint64_t *args, int n)
{
	/* a system call's pointer into a guarded page: the kernel may write there, and its
	 * write would fail (EFAULT) where the program's own would have faulted */
	for (int i = 0; i < n && S.nguarded; i++) {
		struct page *p = find(args[i] >> 12, 0);

		if (p && p->state == P_GUARDED)
			open_page(p);
	}
}

static void forget(struct page *p)
{
	/* the program's own protection back first: its call may fail */
	if (p->state == P_GUARDED) {
		tp_raw3(SYS_mprotect, p->page << 12, 4096, p->prot);
		S.nguarded--;
	}
	p->state = P_UNKNOWN;
}

void tp_dbt_smc_forget(uint64_t start, uint64_t len)
{
	uint64_t first = start >> 12, last = (start + len - 1) >> 12;

	S.ranges_ok = 0;
	S.nranges = 0;
	if (!S.pages || !len || start + len < start)
		return;
	/* the program decides the protection from now on: looked up again at the next
	 * translation from there (page by page up to 8 MiB, python's 1 MiB arenas among
	 * them: a scan of the table's 1 MiB at each was 2% of python3's start-up) */
	if (last - first < 2048 && last - first < (1ull << S.bits)) {
		for (uint64_t pg = first; pg <= last; pg++) {
			struct page *p = find(pg, 0);

			if (p)
				forget(p);
		}
		return;
	}
	for (uint64_t i = 0; i < (1ull << S.bits); i++) {
		struct page *p = &S.pages[i];

		if (p->state != P_FREE && p->page >= first && p->page <= last)
			forget(p);
	}
}
