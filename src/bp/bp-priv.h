/* Internals of src/bp shared by its files: the breakpoint table, SSOL areas, return stubs
 * and shadow stacks of one traced process (struct tp_bps), and the helpers each file
 * offers the others. */
#ifndef TP_BP_BP_PRIV_H
#define TP_BP_BP_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "base/hash.h"
#include "arch/arch.h"
#include "bp/bp.h"
#include "bp/rstub.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* SSOL areas: AREA_SIZE bytes mapped RX within REACH (rel32) of their breakpoints, cut into
 * slots of SLOT_SIZE bytes (the relocated instruction, at most RELOC_MAX bytes, then a jmp
 * back of JMP_LEN bytes). */
#define AREA_SIZE (64 * 1024)
#define SLOT_SIZE 64
#define JMP_LEN 5 /* jmp rel32 */
#define REACH ((int64_t)1 << 31)

/* Returns without a stop: ASYNC_SLOTS return stubs, then as many records, in one mapping
 * anywhere in the address space (stubs reach their records RIP-relative).  A stub's code is
 * the return stub, then at STUB_ENTRY the entry stub that stamps the call's start. */
#define ASYNC_SLOTS 4096
#define STUB_SIZE 160
#define STUB_ENTRY 104
#define STUB_CHUNK 64 /* stubs written at a time */
#define ASYNC_CODE ((uint64_t)ASYNC_SLOTS * STUB_SIZE)
#define ASYNC_SIZE (ASYNC_CODE + (uint64_t)ASYNC_SLOTS * TP_RSTUB_REC_SIZE)
#define REAP_MAX 1023 /* records read at once (with one more word: IOV_MAX) */
#define SWEEP_MAX 512 /* quarantined slots looked at once (two pieces each: IOV_MAX) */
#define RDTSC_0 0x0f  /* rdtsc, the stubs' one instruction a program can forbid */
#define RDTSC_1 0x31

/* Tasks of one process handled at detach. */
#define TASKS_MAX 1024
/* Steps out of a slot at a signal stop (an instruction and its jmp back), and at detach (a
 * slot's copy is one or two instructions, a return stub fourteen, and a tail call chains
 * stubs). */
#define SIGNAL_STEPS_MAX 8
#define LEAVE_STEPS_MAX 128

/* Signatures at the start of the areas (an SSOL area's slot 0, the stubs' stub 0): a later
 * attach finds what an earlier one left mapped (after a crash of tracepad, a thread that
 * could not leave a slot, a stub that may still run) and reuses it instead of mapping more. */
#define SSOL_MAGIC "tracepad ssol 1"
#define STUBS_MAGIC "tracepad stubs1"
struct ssol_head {
	char magic[16];
	uint32_t hazard; /* left with a thread maybe in a slot: never unmapped */
};
struct stubs_head {
	char magic[16];
	uint64_t size, code; /* ASYNC_SIZE, ASYNC_CODE */
	uint32_t slots, stub_size, rec_size;
	uint32_t written; /* stubs written (anext) */
};
/* Anonymous executable mappings looked at for leftovers. */
#define LEFT_MAX 64

struct area {
	uint64_t base;
	unsigned used; /* slots handed out */
	bool keep;     /* an earlier detach left it with a hazard (ssol_head.hazard) */
};

struct bp {
	uint64_t addr; /* 0: empty table entry */
	uint64_t slot;
	uint64_t hits;
	bool ret;	  /* TP_BP_RETURN */
	bool site_ret;	  /* ...caught at the return site: the function reads its return address */
	bool entry;	  /* planted by tp_bp_insert(): its hits are entries */
	bool retsite;	  /* a return site: returns of site_ret calls are caught here */
	uint8_t len;	  /* of the original instruction */
	uint8_t slot_len; /* relocated copy, without the jmp back */
	uint8_t orig[TP_ARCH_MAX_INSN_LEN];
};

struct tp_bps {
	struct tp_proc *p;
	pid_t pid;
	struct bp *pool; /* the breakpoints, pool[0 .. npool) */
	unsigned npool, cap;
	struct tp_hash index; /* addr -> its index in pool */
	struct area *areas;
	unsigned nareas;
	struct tp_event *q; /* events deferred while waiting for one task */
	unsigned qhead, qlen, qcap;
	uint64_t tramp; /* shared return trampoline (an int3 in a slot), 0 until needed */
	struct shadow *sh;
	unsigned nsh;
	/* Returns without a stop (tp_bps_set_async()). */
	tp_bp_return_fn ret_fn;
	void *ret_arg;
	int64_t errno_tpoff;
	bool errno_known;
	bool async_failed; /* no mapping for the stubs: every return stops */
	bool keep_areas;   /* a thread may still be in a slot, or return to one: never unmap */
	uint64_t amap;	   /* the stubs' mapping, 0 until needed */
	unsigned anext;	   /* stubs written so far */
	uint32_t *afree;   /* slots free again (capacity ASYNC_SLOTS) */
	unsigned nafree;
	struct quarantined *aquar; /* slots of frames dropped while hooked */
	unsigned naquar;
	uint8_t (*rbuf)[TP_RSTUB_REC_SIZE]; /* REAP_MAX records */
	/* Areas an earlier attach left (tp_bp_left_scan()). */
	bool left_scanned;
	uint64_t left_stubs; /* a stubs' area found, 0: none */
	uint32_t *aheld;     /* its stubs that may still run: never handed out */
	unsigned naheld;
};

/* The slot of a frame dropped while its stub was still its return address: it could still
 * return through it (a stack switch), so the slot is only reused once its call is done or
 * the stack holds neither the stub's address nor the real one there (quarantine_sweep()). */
struct quarantined {
	uint64_t sp, ret;
	uint32_t slot;
};

/* A hooked call in flight: the return address it replaced at @sp.  While unhooked (an
 * unwinder runs in the thread), the real return address is back in place. */
struct frame {
	uint64_t sp, ret, func;
	int32_t slot; /* its return stub (returns without a stop), or SLOT_TRAMP, SLOT_SITE */
	bool unhooked;
	bool borrowed; /* a vfork child's copy of its parent's frame: the slot is the parent's */
};

/* A frame's return goes through the trampoline; or, left in place, is caught at a breakpoint
 * where it returns to (the function reads its return address: glibc's dlsym, dlopen). */
#define SLOT_TRAMP -1
#define SLOT_SITE -2
/* Bytes of a TP_BP_RETURN function's code read for tp_arch_reads_return_slot(). */
#define SITE_SCAN 256

/* Frames dropped as unwound are kept a while: should one of them return after all (a stack
 * switch fooled the stack-pointer test), its return address is still known. */
#define GRAVE 32

/* Stack pointers, return addresses: 8-byte words of the tracee. */
#define WORD 8

/* Per-thread shadow stack of hooked calls (few threads: searched linearly). */
struct shadow {
	pid_t tid;
	struct frame *f;
	unsigned n, cap;
	struct frame grave[GRAVE];
	unsigned ngrave;   /* total dropped, the last GRAVE kept */
	uint64_t errno_fs; /* the thread pointer its errno was checked readable for */
	bool errno_ok;
};

static inline struct bp *tp_bp_find(struct tp_bps *b, uint64_t addr)
{
	uint64_t *i = tp_hash_get(&b->index, addr);

	return i ? &b->pool[*i] : NULL;
}

static inline uint64_t tp_bp_stub_at(const struct tp_bps *b, uint32_t k)
{
	return b->amap + (uint64_t)k * STUB_SIZE;
}

static inline uint64_t tp_bp_rec_at(const struct tp_bps *b, uint32_t k)
{
	return b->amap + ASYNC_CODE + (uint64_t)k * TP_RSTUB_REC_SIZE;
}

/* What a frame's return address is while it is hooked (a return site's frame leaves the
 * real one in place). */
static inline uint64_t tp_bp_hook_of(const struct tp_bps *b, const struct frame *f)
{
	if (f->slot == SLOT_SITE)
		return f->ret;
	return f->slot >= 0 ? tp_bp_stub_at(b, (uint32_t)f->slot) : b->tramp;
}

static inline bool tp_bp_in_stubs(const struct tp_bps *b, uint64_t pc)
{
	return b->amap && pc >= b->amap && pc < b->amap + ASYNC_CODE;
}

/* In an entry stub: a thread there goes on into a slot. */
static inline bool tp_bp_in_entry_stub(const struct tp_bps *b, uint64_t pc)
{
	return tp_bp_in_stubs(b, pc) && (pc - b->amap) % STUB_SIZE >= STUB_ENTRY;
}

/* Move stopped task @tid, at @pc in an entry stub, to where the stub goes on (the slot), its
 * rax and rdx as the stub found them: the call keeps what it stamped, if anything.  0 or
 * -errno. */
int tp_bp_leave_entry_stub(struct tp_bps *b, pid_t tid, uint64_t pc);

/* bp.c: the table */
struct bp *tp_bp_add(struct tp_bps *b, uint64_t addr);

/* area.c: SSOL areas */
/* An area with a free slot within reach of @addr, mapped by injection into stopped task
 * @tid when none is there yet; NULL with *@err. */
struct area *tp_bp_area_for(struct tp_bps *b, pid_t tid, uint64_t addr, int *err);
/* The shared return trampoline: an int3 in a slot near @near. */
int tp_bp_make_tramp(struct tp_bps *b, pid_t tid, uint64_t near);
int tp_bp_unmap(struct tp_bps *b, pid_t tid, uint64_t base, uint64_t len);
struct bp *tp_bp_in_slot(struct tp_bps *b, uint64_t pc);
bool tp_bp_in_areas(struct tp_bps *b, uint64_t pc);
/* Adopt the SSOL areas an earlier attach left in the process (into b->areas) and note its
 * stubs' area (b->left_stubs), once per process image. */
void tp_bp_left_scan(struct tp_bps *b);
/* At detach: unmap the SSOL areas, or mark them as left with a hazard. */
int tp_bp_areas_leave(struct tp_bps *b, pid_t tid);

/* stubs.c: returns without a stop */
int tp_bp_async_alloc(struct tp_bps *b);
void tp_bp_slot_put(struct tp_bps *b, uint32_t slot);
int32_t tp_bp_slot_get(struct tp_bps *b, pid_t tid);
void tp_bp_drop_top(struct tp_bps *b, struct shadow *s);
/* At detach, with every return address given back that could be: unmap the stubs' area when
 * no stub can run any more, else leave it for a later attach.  @maybe (ASYNC_SLOTS bytes):
 * 1 for slots whose frame's return address could not be given back (their stub may still
 * run unless done); @busy: a thread could not be moved out of the stubs. */
int tp_bp_stubs_leave(struct tp_bps *b, pid_t tid, uint8_t *maybe, bool busy);
int tp_bp_reap_frames(struct tp_bps *b, pid_t tid, struct shadow *s, uint64_t limit, bool strict,
		      bool running, uint64_t word_at, uint64_t *word);

/* return.c: shadow stacks and hooked returns */
struct shadow *tp_bp_shadow_of(struct tp_bps *b, pid_t tid, bool create);
int tp_bp_shadow_reserve(struct shadow *s, unsigned n);
int tp_bp_unhook_return(struct tp_bps *b, pid_t tid, uint64_t sp, struct tp_bp_stop *out);
/* A breakpoint at return site @at (added when none is there); 0 or -errno. */
int tp_bp_site_plant(struct tp_bps *b, pid_t tid, uint64_t at);

#endif
