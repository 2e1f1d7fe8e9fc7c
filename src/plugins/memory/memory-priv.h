/* What the two halves of the built-in `memory` plugin share: the allocator calls it follows,
 * the per-process block tables and allocation sites (tracking.c), read at a process's exit
 * by the leak check and its report (report.c). */
#ifndef TP_PLUGINS_MEMORY_PRIV_H
#define TP_PLUGINS_MEMORY_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/user.h>

#include "base/hash.h"
#include "plugins/plugins.h"

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

/* A live block; addr 0 marks a free entry of the pool. */
struct block {
	uint64_t addr;
	uint64_t size; /* of a free entry: index + 1 of the next free one, 0 at the end */
	uint32_t site;
};

/* The live blocks of a process: records in a pool whose freed entries are reused, indexed by
 * address. */
struct block_table {
	struct tp_hash index; /* addr -> its index in pool */
	struct block *pool;
	size_t npool, cap, used;
	uint64_t free_head; /* index + 1 of a free entry, 0 when none */
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
	bool detached;	   /* reported as tracepad detaches: the process runs on */
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
	bool no_freeres; /* freeres=no: libc's and libstdc++'s exit-time frees not run */
	bool json;	 /* the report as one JSON object a process */
	unsigned kinds;	 /* bit per ST_* kind whose records are printed (kinds=) */
	struct mem_proc *procs;
	struct mem_thread *threads;
	struct site **sites; /* sites[0] unused */
	size_t nsites, sites_cap;
	struct tp_hash site_index; /* hash of (pid, pcs) -> its index in sites */
	struct mem_thread *last;   /* the thread of the last call (a call's return is its) */
	struct {		   /* fn_of() by name, direct-mapped by its address */
		const char *name;
		char text[48]; /* what it said (the address may be another name's later) */
		enum mem_fn fn;
	} fns[16];
	bool lost_track; /* out of memory once: the report says so */
};

/* memcheck's leak-check heuristics (report.c). */
enum { H_NONE, H_STDSTRING, H_LENGTH64, H_NEWARRAY, H_MULTIPLE, H_N };
static const char *const heur_names[H_N] = {
    [H_STDSTRING] = "stdstring",
    [H_LENGTH64] = "length64",
    [H_NEWARRAY] = "newarray",
    [H_MULTIPLE] = "multipleinheritance",
};

/* Blocks of one kind allocated at one site. */
struct leak_group {
	uint8_t kind;
	uint32_t site;
	uint64_t blocks, bytes, indirect; /* indirect: bytes of the blocks they hold */
};

/* What the leak check found in one process. */
struct leak_result {
	int pid, nthreads;
	uint64_t inuse_bytes, inuse_blocks;
	uint64_t kind_bytes[ST_NKINDS], kind_blocks[ST_NKINDS];
	uint64_t heur_bytes[H_N], heur_blocks[H_N]; /* still reachable through a heuristic */
	struct leak_group *groups;		    /* largest first; NULL: summary only */
	size_t ngroups;
	bool short_read;
};

/* Print @r for process @p (whose memory is read through @pid), as text or JSON, the records
 * of the kinds asked for (output.c). */
void tp_mem_report(struct mem *m, int pid, const struct mem_proc *p, const struct leak_result *r);

/* Sort the blocks process @p still holds as memcheck does and print the report; the process
 * is stopped at its exit.  Returns 0 or -errno. */
int tp_mem_leak_check(struct mem *m, struct mem_proc *p);

#endif
