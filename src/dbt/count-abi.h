/* What `tracepad count --engine dbt` (src/count/dbt.c) and the runtime's counter
 * (src/dbt/rt-count.c) share beyond the control block: the block tables of histograms and
 * regions.  The area follows the control block in its memfd (at ctl->size, page-aligned);
 * tracepad writes the header, the runtime the tables; each side checks the other's offsets
 * and counts against the area's size.  Layout in docs/INTERNALS.md ("The code cache"). */
#ifndef TP_DBT_COUNT_ABI_H
#define TP_DBT_COUNT_ABI_H

#include <stdint.h>

#define TP_DBT_COUNTS_MAGIC 0x53544e43544244ull /* "DBTCNTS" */

/* flags, by tracepad */
#define TP_DBT_CF_BLOCKS 0x01 /* per-block counters (histograms, regions) */
#define TP_DBT_CF_REGION 0x02 /* count from start_pc to its return (or stop_pc) only */
#define TP_DBT_CF_API 0x04    /* count between tracepad_step_begin() and _end() only */

/* A slot: one translated block (its instructions, counted once per execution of the
 * block), or one rep string instruction (counted once per iteration). */
struct tp_dbt_slot {
	uint64_t pc;   /* the block's first instruction */
	uint32_t insn; /* its instructions are insns[insn .. insn + n) */
	uint16_t n;
	uint16_t rep; /* 1: a rep instruction, counted per iteration */
};

struct tp_dbt_insn {
	uint64_t pc;
	uint32_t mnemonic; /* tp_arch_mnemonic_name() */
	uint32_t pad;
};

struct tp_dbt_counts {
	/* by tracepad */
	uint64_t magic;
	uint32_t flags;
	uint32_t max_slots;
	uint64_t max_insns;
	uint64_t slots_off;	    /* struct tp_dbt_slot[max_slots], from the area's start */
	uint64_t insns_off;	    /* struct tp_dbt_insn[max_insns] */
	uint64_t totals_off;	    /* uint64_t[max_slots]: executions (iterations) of each slot */
	uint64_t start_pc, stop_pc; /* --start / --stop, run-time addresses; 0 for none */
	/* by the runtime: slots and instructions are complete below these (release) */
	uint32_t nslots;
	uint32_t full; /* slots or instructions ran out: later blocks are not in histograms */
	uint64_t ninsns;
	uint64_t excluded; /* instructions of tracepad's agent (its text is never counted) */
};

#endif
