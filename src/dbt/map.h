/* The tracer's side of the code cache's mapping and breakpoint repositories (layout and
 * protocol: map-abi.h, docs/INTERNALS.md): open those of a program running in the cache,
 * map cache pcs to program pcs and program pcs to their cache copies, set and remove
 * breakpoints in every copy of an instruction (now and, through the runtime, in the copies
 * made later), and read the program's text as it is or as a debugger wrote it.
 *
 * The repositories are read while the program runs: records are append-only and published
 * with a release store of their count, so a reader sees whole records; a record whose
 * program code went away is marked stale, never torn.  Writing breakpoints and the code
 * they patch needs the right to write /proc/PID/mem (the program's tracer, or its parent). */
#ifndef TP_DBT_MAP_H
#define TP_DBT_MAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct tp_dbt_map;

/* Open the repositories of @pid, a process or one of its threads (the memfd the runtime
 * keeps among its fds); -ENOENT when the process runs no code cache (or closed that fd:
 * then pass an fd of it to _open_fd), -EAGAIN for a forked child that has no copy of its
 * own yet (or a vfork child: its parent's are its own). */
int tp_dbt_map_open(pid_t pid, struct tp_dbt_map **out);
/* ... from @fd, an open descriptor of the memfd (not taken over: the caller closes it). */
int tp_dbt_map_open_fd(pid_t pid, int fd, struct tp_dbt_map **out);
void tp_dbt_map_close(struct tp_dbt_map *m);
/* Changes at every record published or marked stale: a reader polls it to know its view
 * is current. */
uint64_t tp_dbt_map_generation(const struct tp_dbt_map *m);

/* What the code at a cache address is. */
enum tp_dbt_pc_kind {
	TP_DBT_PC_INSN,	   /* the start of an instruction's code: the program is at pc exactly */
	TP_DBT_PC_INSIDE,  /* in the code of the instruction at pc, past its first byte */
	TP_DBT_PC_HIDDEN,  /* instrumentation: the program's next instruction is at pc */
	TP_DBT_PC_STUB,	   /* an exit stub: the program's next instruction is at pc */
	TP_DBT_PC_LOOKUP,  /* an indirect branch's target lookup: pc is the branch's address */
	TP_DBT_PC_RUNTIME, /* the runtime's own code, no program address (pc 0) */
};

struct tp_dbt_pc {
	uint64_t pc;   /* the program address */
	uint64_t site; /* INSN, INSIDE: where the instruction's code begins in the cache;
			  HIDDEN: where the next one's does, when it is in the same block (a
			  place to roll ahead to), else 0 */
	uint32_t len;  /* the program instruction's length, where site is set */
	int kind;      /* enum tp_dbt_pc_kind */
	int stale;     /* its program code was unmapped or reprotected since */
};

/* The program address of @cache_pc; -ENOENT when it is in no translation. */
int tp_dbt_map_to_program(struct tp_dbt_map *m, uint64_t cache_pc, struct tp_dbt_pc *out);

struct tp_dbt_copy {
	uint64_t cache; /* where the instruction's code begins: its breakpoint site */
	uint32_t len;	/* bytes of its code */
	int stale;
};

/* The cache copies of the instruction at program address @pc: how many there are, the
 * first @max of them in @out (a scan of every record). */
size_t tp_dbt_map_copies(struct tp_dbt_map *m, uint64_t pc, struct tp_dbt_copy *out, size_t max);

/* One range of cache code between two marks, as the walk gives them. */
struct tp_dbt_range {
	uint64_t block;	      /* the cache address of its block */
	uint64_t cache, size; /* the range */
	uint64_t pc;	      /* as struct tp_dbt_pc (0 for a stub whose target is unread) */
	uint32_t len;	      /* INSN: the program instruction's length */
	int kind;	      /* TP_DBT_PC_INSN (the whole range is the instruction's code),
				 HIDDEN, STUB or LOOKUP */
	int stale;
};

/* Call @fn on every range of every record, in cache order within each chunk; stops at the
 * first non-zero result, which it returns. */
int tp_dbt_map_foreach(struct tp_dbt_map *m, int (*fn)(const struct tp_dbt_range *r, void *arg),
		       void *arg);

/* A breakpoint at program address @pc: an int3 in every live copy now, and in those made
 * later, also of code mapped there again after an unmap (it stays until removed).  The
 * program's text is not written.  -EEXIST when set already, -ENOSPC when the table is full,
 * -errno when the program's memory at @pc cannot be read (nothing mapped) or written. */
int tp_dbt_map_bp_insert(struct tp_dbt_map *m, uint64_t pc);
/* ... removed: every copy gets its code back.  -ENOENT when none is set there. */
int tp_dbt_map_bp_remove(struct tp_dbt_map *m, uint64_t pc);
/* Is a breakpoint set at @pc?  Its program byte in @orig. */
int tp_dbt_map_bp_at(struct tp_dbt_map *m, uint64_t pc, uint8_t *orig);

/* @len bytes of the program's memory at @addr into @buf: the program's own bytes where
 * breakpoints are, or an int3 there with @as_written (what a debugger that wrote them reads
 * back natively).  Bytes read, or -errno. */
ssize_t tp_dbt_map_read_text(struct tp_dbt_map *m, uint64_t addr, void *buf, size_t len,
			     int as_written);

#endif
