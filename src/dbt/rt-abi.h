/* What tracepad's launcher (src/dbt/launch.c) and the code-cache runtime it maps into the
 * program (src/dbt/rt-*.c) agree on: where the runtime lives, the boot record the launcher
 * writes, and the layout of the per-thread block that cache code reaches through %gs. */
#ifndef TP_DBT_RT_ABI_H
#define TP_DBT_RT_ABI_H

/* The runtime's own region, far below where the kernel places the program's mappings
 * (top-down from the stack) and far above its brk heap, so that the program's own
 * addresses are those of a native run without ASLR.  Cache chunks are placed apart, near
 * the code they translate (rel32 reach). */
#define TP_DBT_REGION 0x7d0000000000ull
#define TP_DBT_RT_AT (TP_DBT_REGION)		       /* the runtime image */
#define TP_DBT_ZYDIS_AT (TP_DBT_REGION + 0x1000000ull) /* libZydis, privately loaded */
#define TP_DBT_HEAP_AT (TP_DBT_REGION + 0x4000000ull)  /* boot record, stacks, tables */
#define TP_DBT_HEAP_SIZE 0x4000000ull
#define TP_DBT_CTL_AT (TP_DBT_REGION + 0x40000000ull) /* the shared control block */
/* Address space for the runtime's other mappings (thread blocks, the cache's writable
 * views), so that none moves a mapping of the program from where it lands natively. */
#define TP_DBT_SPACE_AT (TP_DBT_REGION + 0x1000000000ull)
#define TP_DBT_SPACE_END (TP_DBT_REGION + 0x10000000000ull)
#define TP_DBT_STACK_SIZE 0x40000ull /* the runtime's start-up stack */

/* Offsets in the per-thread block (%gs base).  Cache code saves a register or two in the
 * scratch slots and enters the runtime through the entry slots, which are absolute
 * addresses: "jmp [gs:off]" reaches the runtime from any chunk. */
#define TP_DBT_T_RAX 0	    /* program's rax while cache code uses rax */
#define TP_DBT_T_RCX0 8	    /* rcx before a rep string instruction */
#define TP_DBT_T_COUNT 16   /* the thread's instruction count */
#define TP_DBT_T_NEXT 24    /* cache address an exit jumps to */
#define TP_DBT_T_IBL_RCX 32 /* rcx and rdx while an indirect branch is looked up */
#define TP_DBT_T_IBL_RDX 40
#define TP_DBT_T_ARG 48	     /* why the gate was entered (TP_DBT_GATE_*) */
#define TP_DBT_T_DIRECT 56   /* entry: unlinked direct exit, rax = its stub */
#define TP_DBT_T_IBL 64	     /* entry: indirect branch lookup, rax = program target */
#define TP_DBT_T_GATE 72     /* entry: the gate, rax = cache address to come back to */
#define TP_DBT_T_TABLE 80    /* the indirect branch table: {pc, cache} * TP_DBT_IBL_SIZE */
#define TP_DBT_T_RDX 88	     /* second scratch */
#define TP_DBT_T_SELF 96     /* the block's own address */
#define TP_DBT_T_MISS 104    /* entry: an inline lookup missed, rax = program target */
#define TP_DBT_T_STACK 112   /* top of the thread's runtime stack, where its C code runs */
#define TP_DBT_T_FRAME 120   /* the program's registers as the last entry into C pushed them */
#define TP_DBT_T_CELLS 128   /* the count's other cells (below) */
#define TP_DBT_T_PRSP 248    /* the program's rsp while an entry into C switches stacks */
#define TP_DBT_T_FLUSHED 256 /* the part of the count already in the control block */
#define TP_DBT_T_STACK_SIZE 0x10000ull
#define TP_DBT_T_SIZE (TP_DBT_T_PRSP + 8)

/* The thread's count is the sum of cells that blocks add to in turn (TP_DBT_T_COUNT, then
 * TP_DBT_T_CELLS on): one counter added to by every block made a chain of read-add-stores
 * through memory, a block after the other, that bounded the program's speed. */
#define TP_DBT_NCELLS 16
#define TP_DBT_CELL_OFF(k) ((k) ? TP_DBT_T_CELLS + 8 * ((k)-1) : TP_DBT_T_COUNT)
#define TP_DBT_T_TABLE_AT 12288 /* the table follows the block (rt-main.c) */

/* The table is indexed by the target's low bits (movzwl: no flag is touched). */
#define TP_DBT_IBL_BITS 16
#define TP_DBT_IBL_SIZE (1 << TP_DBT_IBL_BITS)

/* Gate reasons. */
#define TP_DBT_GATE_SYSCALL 1
#define TP_DBT_GATE_UNDECODABLE 2 /* then ud2 */

/* Unlinked exit stub, written by the translator and patched by the dispatcher:
 *   mov [gs:RAX], rax; lea rax, [rip - 16]; jmp [gs:DIRECT]; .quad target; .quad link
 * Linking overwrites its first bytes with a jmp to the target's block. */
#define TP_DBT_STUB_TARGET 24
#define TP_DBT_STUB_LINK 32
#define TP_DBT_STUB_SIZE 40
/* A taken exit's stub whose jcc rel32 has its rel32 4-aligned: .quad link holds
 * TP_DBT_STUB_JCC | (stub - the rel32's address) until a far link, and linking aims the
 * jcc itself at the target (a self-loop's every iteration went jcc, then the stub's jmp:
 * 3-4x the native time of sha256sum's byte-swap loop). */
#define TP_DBT_STUB_JCC 0xdbcc000000000000ull

#ifndef __ASSEMBLER__
#include <stdint.h>

/* The names and addresses of libZydis's entry points the runtime calls, resolved by the
 * launcher that loaded it. */
enum tp_dbt_zydis_fn {
	TP_DBT_ZY_DECODER_INIT,
	TP_DBT_ZY_DECODE_FULL,
	TP_DBT_ZY_CALC_ABS,
	TP_DBT_ZY_MNEMONIC_STRING,
	TP_DBT_ZY_ENCODE_ABS,
	TP_DBT_ZY_NOP_FILL,
	TP_DBT_ZY_DECODE_INSN, /* without the operands, which most translations need not */
	TP_DBT_ZY_DECODE_OPS,
	TP_DBT_ZY_COUNT
};

/* The program's registers at its first instruction (struct user_regs_struct's order). */
struct tp_dbt_regs {
	uint64_t r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi;
	uint64_t orig_rax, rip, cs, eflags, rsp, ss, fs_base, gs_base, ds, es, fs, gs;
};

/* Written by the launcher at TP_DBT_HEAP_AT; the runtime starts with its address in rdi. */
struct tp_dbt_boot {
	uint64_t magic;
	struct tp_dbt_regs regs;
	uint64_t ctl; /* the shared control block (struct tp_agent_ctl), or 0 */
	uint64_t ctl_size;
	uint64_t heap_end; /* the heap is [TP_DBT_HEAP_AT + sizeof boot, heap_end) */
	uint64_t zydis[TP_DBT_ZY_COUNT];
	int32_t pid;
	uint32_t flags;
	uint64_t cache_size; /* bytes of code the cache holds before it is flushed; 0: default */
};
#define TP_DBT_BOOT_MAGIC 0x544f4f4254424454ull
/* flags: a breakpoint at the program's first instruction, set before its first translation,
 * where a debugger that launched the program takes it over (src/debug) */
#define TP_DBT_BOOT_BREAK_ENTRY 1u
/* flags: status flags exact at every instruction's start (a debugger reads them there): the
 * count is never an add where the block's instructions would make them dead */
#define TP_DBT_BOOT_EXACT_FLAGS 2u
/* flags: the mapping repository is kept in private memory (signal handlers need it), not
 * published in a memfd that tracers map, and no breakpoint is planted: bench/dbt measures
 * what publishing costs (TRACEPAD_DBT_PUBLISH=0) */
#define TP_DBT_BOOT_UNPUBLISHED 4u
/* flags: written by a debugger into a forked child's copy of the boot record at its first
 * stop: the child keeps its copy of the breakpoints, and stops at a breakpoint of its own
 * where it goes on in the program, for the debugger to take it there (src/debug) */
#define TP_DBT_BOOT_BREAK_FORKED 8u

#endif
#endif
