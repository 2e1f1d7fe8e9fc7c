/* The mapping and breakpoint repositories of the code cache: the layout of the shared memory
 * that the runtime (rt-map.c) writes inside the program and a tracer (map.c: tracepad, the
 * debugger interposer) reads and, for breakpoints, writes.  docs/INTERNALS.md describes the
 * protocol ("The mapping and breakpoint repositories"). */
#ifndef TP_DBT_MAP_ABI_H
#define TP_DBT_MAP_ABI_H

#include <stdint.h>

#include "dbt/rt-abi.h"

/* A memfd of this name (its /proc/PID/fd link reads "/memfd:tracepad-dbt-map (deleted)"),
 * kept open by the runtime (close-on-exec, at a high number) and mapped here. */
#define TP_DBT_MAP_NAME "tracepad-dbt-map"
#define TP_DBT_MAP_AT (TP_DBT_REGION + 0x100000000ull)
#define TP_DBT_MAP_MAGIC 0x50414d5442445054ull /* "TPDBTMAP" */
#define TP_DBT_MAP_VERSION 1

/* One area per cache chunk: an index of record offsets then the records, both filled
 * upwards; the file is sparse (memfd pages exist once written). */
#define TP_DBT_MAP_AREAS 64
#define TP_DBT_MAP_INDEX_CAP (1u << 20) /* records an area holds (blocks are 16-aligned) */
#define TP_DBT_MAP_RECS_CAP (64ull << 20)
#define TP_DBT_MAP_HEAD_SIZE (1ull << 20) /* head, areas, breakpoints */
#define TP_DBT_MAP_AREA_SPAN ((uint64_t)TP_DBT_MAP_INDEX_CAP * 4 + TP_DBT_MAP_RECS_CAP)
#define TP_DBT_MAP_SIZE (TP_DBT_MAP_HEAD_SIZE + TP_DBT_MAP_AREAS * TP_DBT_MAP_AREA_SPAN)
#define TP_DBT_MAP_INDEX_OFF(i) (TP_DBT_MAP_HEAD_SIZE + (uint64_t)(i)*TP_DBT_MAP_AREA_SPAN)
#define TP_DBT_MAP_RECS_OFF(i) (TP_DBT_MAP_INDEX_OFF(i) + (uint64_t)TP_DBT_MAP_INDEX_CAP * 4)
#define TP_DBT_MAP_BPS 4096 /* breakpoint slots (open addressing: at most half are used) */

/* What a range of cache code is, from its mark to the next one (or the block's end). */
enum tp_dbt_map_kind {
	TP_DBT_MK_INSN = 0,   /* the code of the program instruction at pc + off: a site */
	TP_DBT_MK_STUB = 1,   /* an exit stub: the program is at its target (+ STUB_TARGET) */
	TP_DBT_MK_HIDDEN = 2, /* instrumentation before the instruction at pc + off */
	TP_DBT_MK_LOOKUP = 3, /* the lookup of the target of the indirect branch at pc + off */
};
#define TP_DBT_MK_SHIFT 14
#define TP_DBT_MK_OFF 0x3fffu

struct tp_dbt_map_mark {
	uint16_t cache_off; /* from the block's start */
	uint16_t prog;	    /* kind << TP_DBT_MK_SHIFT | offset from the block's pc */
	uint8_t byte;	    /* INSN: the first byte of its code, as translated (no int3) */
	uint8_t len;	    /* INSN: the length of the program instruction */
	uint16_t pad;
};

/* One translated block; immutable once published, but for flags. */
struct tp_dbt_map_rec {
	uint64_t cache, pc; /* where the block's code begins, and its program address */
	uint32_t len, n;    /* bytes of cache code, marks */
	uint32_t flags;	    /* TP_DBT_REC_* (atomic) */
	uint32_t pad;
	struct tp_dbt_map_mark mark[];
};
#define TP_DBT_REC_STALE 1 /* its program code was unmapped or reprotected: no breakpoints */

struct tp_dbt_map_area {
	uint64_t rx, rw; /* the chunk where its code runs, and its writable view */
	uint64_t size;
	uint32_t epoch; /* odd while the area is reset (a flushed chunk) */
	uint32_t pad;
	uint64_t nrec; /* records published (release) */
	uint64_t used; /* bytes of records */
};

/* A breakpoint a tracer set at a program address: the byte the program has there. */
struct tp_dbt_map_bp {
	uint64_t pc;
	uint8_t orig;
	uint8_t state; /* TP_DBT_BP_* */
	uint8_t pad[6];
};
#define TP_DBT_BP_FREE 0
#define TP_DBT_BP_SET 1
#define TP_DBT_BP_GONE 2 /* removed: a tombstone, so that probing goes on past it */

struct tp_dbt_map_head {
	uint64_t magic;
	uint32_t version, head_size;
	uint64_t size;	       /* of the file */
	uint64_t at;	       /* where the program has it mapped */
	int32_t pid;	       /* the process whose cache it describes */
	uint32_t nareas;       /* areas in use (release) */
	uint64_t gen;	       /* + 1 at every record published or marked stale */
	uint64_t rt_lo, rt_hi; /* the runtime's own code: hidden, in no area */
	uint32_t bp_seq;       /* odd while a tracer changes breakpoints and their sites */
	int32_t bp_writer;     /* that tracer's pid */
	uint32_t nbps;	       /* breakpoints set */
	uint32_t bp_slots;
	uint64_t areas_off; /* struct tp_dbt_map_area[TP_DBT_MAP_AREAS] */
	uint64_t bps_off;   /* struct tp_dbt_map_bp[bp_slots] */
};

static inline uint64_t tp_dbt_map_bp_hash(uint64_t pc, uint32_t slots)
{
	return ((pc * 0x9e3779b97f4a7c15ull) >> 40) & (slots - 1);
}

#endif
