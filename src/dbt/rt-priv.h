/* Shared by the files of the code-cache runtime (rt-*.c), which runs inside the program
 * with nothing of it: no libc, raw system calls, memory from its own heap. */
#ifndef TP_DBT_RT_PRIV_H
#define TP_DBT_RT_PRIV_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent-abi.h"
#include "dbt/map-abi.h"
#include "dbt/rt-abi.h"

#define TP_DBT_HIDDEN __attribute__((visibility("hidden")))

/* The registers ENTER_C saved on the runtime's stack (rt-entry.S), lowest address first. */
struct tp_dbt_frame {
	uint64_t r15, r14, r13, r12, r11, r10, r9, r8, rdi, rsi, rbp, rbx, rdx, rcx, rax;
	uint64_t rflags, rsp;
};

/* The scratch slots of a thread as a signal found them (rt-signal.c). */
struct tp_dbt_saved {
	uint64_t uc, rax, rcx0, rdx, next, arg, ibl_rcx, ibl_rdx;
	uint64_t count[TP_DBT_NCELLS]; /* each cell of the count */
	uint64_t cache_pc, prog_pc;    /* the interrupted pc, and what the handler was shown */
	uint64_t frame, stack, prsp;   /* the thread's entry frame, runtime stack top, PRSP */
	uint64_t rt_rsp; /* the interrupted rsp on the runtime's stack (PRSP shown instead), or 0 */
};
#define TP_DBT_SAVES 32
#define TP_DBT_PENDING 8

/* The per-thread block behind %gs: the fixed part of rt-abi.h (TP_DBT_T_SIZE bytes), then
 * the runtime's own. */
struct tp_dbt_thread {
	uint64_t rax, rcx0, count, next, ibl_rcx, ibl_rdx, arg, direct, ibl, gate, table, rdx, self;
	uint64_t miss, stack, frame;
	uint64_t cells[TP_DBT_NCELLS - 1]; /* the count's other cells (rt-abi.h) */
	uint64_t prsp;
	uint64_t flushed;     /* part of count already added to the control block */
	uint64_t vfork_count; /* count when a vfork child started sharing this block */
	int vfork_pending;
	int nsave;
	struct tp_dbt_saved save[TP_DBT_SAVES];
	/* in the runtime's C code, which a handler must not re-enter: signals are deferred, one
	 * of each standard signal as the kernel keeps them, real-time ones queued */
	int in_c;
	int npending;
	siginfo_t pending[TP_DBT_PENDING];
	/* threads: each has its block, lookup table and start-up stack in one mapping */
	struct tp_dbt_thread *link; /* every thread the process started, newest first */
	int32_t tid;
	uint32_t slot;	/* its entry in the control block's threads */
	uint64_t fs;	/* its %fs base (0 until the program's loader sets up TLS) */
	int tcb_in;	/* %fs is the runtime's private TCB meanwhile (rt-cache.c) */
	uint64_t mask;	/* a new thread's signal mask, unblocked once its %gs is set */
	int forked;	/* ... or a new process's, which copies the cache first */
	uint32_t *sync; /* and then tells its parent through this word */
	uint64_t entry; /* where a new thread enters the cache, with these registers */
	struct tp_dbt_regs regs;
	/* The kernel's alternate signal stack is the runtime's (rt-signal.c): every frame is
	 * delivered there and moved to where the program expects it; the program's own
	 * sigaltstack is kept here. */
	uint64_t alt;
	stack_t prog_ss;
	/* where it may run in the cache, for a flush's old chunks (rt-cache.c) */
	uint64_t epoch;	    /* the cache's epoch at its last dispatch */
	uint64_t pin;	    /* the cache address it goes on at until its next dispatch, or 0 */
	uint64_t pin_epoch; /* the epoch then */
	uint64_t vfork_pin; /* where it comes back from a vfork */
	int in_dispatch;    /* in the dispatcher: it goes on in the current cache */
	int exiting, dead;  /* it made exit; the kernel said it is gone */
	/* a new thread's or process's x87/SSE registers, its parent's at the clone or fork (the
	 * runtime's C code that made it uses xmm registers): put back as it enters the cache */
	int has_fx;
	uint8_t fx[512] __attribute__((aligned(64)));
};

/* The process-wide state of the runtime. */
struct tp_dbt_rt {
	struct tp_dbt_boot *boot;
	struct tp_agent_ctl *ctl;
	uint64_t heap, heap_end;
	int pid;
	int failed;
	struct tp_dbt_thread *main;
	struct tp_dbt_thread *threads; /* the list of every thread block, under the lock */
	int lock; /* the runtime's C code runs in one thread at a time (futex word) */
};
extern struct tp_dbt_rt tp_dbt TP_DBT_HIDDEN;

/* rt-main.c */
void *tp_dbt_alloc(size_t size) TP_DBT_HIDDEN; /* zeroed, 64-aligned, never freed; NULL */
/* mmap(@prot, @flags, @fd) of @size bytes in the runtime's own address space (never where
 * the program's mappings go); the address or -errno. */
long tp_dbt_mmap(size_t size, int prot, int flags, int fd) TP_DBT_HIDDEN;
/* Fault in the pages of [@at, @at + @len) with one system call (memory the runtime is about
 * to fill: in a VM a fault taken a page at a time costs 15-25 us, more than the work on the
 * page).  Best effort: before Linux 5.14 (EINVAL) the pages fault as they are touched. */
void tp_dbt_populate(uint64_t at, uint64_t len, int write) TP_DBT_HIDDEN;
#define TP_DBT_POPULATE_STEP (256ull << 10) /* how far ahead, at most */
/* How far ahead to fault in a region of which @done bytes are in already: as far again,
 * from 32 KiB to TP_DBT_POPULATE_STEP (a page faulted in and never used costs a twentieth
 * of a fault, and a short run uses a few KiB of most regions). */
static inline uint64_t tp_dbt_populate_step(uint64_t done)
{
	return done < (32ull << 10)	     ? 32ull << 10
	       : done > TP_DBT_POPULATE_STEP ? TP_DBT_POPULATE_STEP
					     : done;
}
/* Record why the run cannot go on correctly (the first reason only) for tracepad. */
void tp_dbt_fail(const char *what, uint64_t pc) TP_DBT_HIDDEN;
/* Add the calling thread's count to the control block (what was not added before). */
void tp_dbt_flush(struct tp_dbt_thread *t) TP_DBT_HIDDEN;
/* Give @t its entry in the control block now (threads are listed in creation order). */
void tp_dbt_slot(struct tp_dbt_thread *t) TP_DBT_HIDDEN;
/* ... and every thread's: the process ends or execs. */
void tp_dbt_flush_all(void) TP_DBT_HIDDEN;
long tp_dbt_gettid(void) TP_DBT_HIDDEN;
/* A thread block with its lookup table and start-up stack, listed; NULL. */
struct tp_dbt_thread *tp_dbt_thread_new(void) TP_DBT_HIDDEN;
/* The new thread's first code: its %gs, its mask, then the cache at t->entry. */
__attribute__((noreturn)) void tp_dbt_thread_start(struct tp_dbt_thread *t) TP_DBT_HIDDEN;
void tp_dbt_lock(void) TP_DBT_HIDDEN;
void tp_dbt_unlock(void) TP_DBT_HIDDEN;

/* rt-chunk.c: code is translated into chunks of this size.  A chunk is a memfd mapped
 * twice: r-x where cache code runs, and a writable view elsewhere that translation writes
 * through (never a writable page that may run). */
#define TP_DBT_CHUNK_SIZE (16ull << 20)
#define TP_DBT_CHUNKS 64
struct tp_dbt_chunk {
	uint64_t rx, rw, used;
	uint64_t populated; /* bytes from its start faulted in, in both views */
	uint64_t *links;    /* its exit stubs that are linked (undone when their target goes) */
	uint64_t nlinks, links_in; /* and the bytes of its list faulted in */
	uint64_t retired;	   /* the epoch of the flush that retired it; 0 while in use */
	int free;		   /* retired, and every thread has left it: to be filled anew */
};
/* The cache holds @size bytes of code (0: its default), blocks take up to @room. */
void tp_dbt_chunk_init(uint64_t size, uint64_t room) TP_DBT_HIDDEN;
/* A chunk near @pc with room for a block; NULL.  A full cache is flushed first. */
struct tp_dbt_chunk *tp_dbt_chunk_for(uint64_t pc) TP_DBT_HIDDEN;
int tp_dbt_cache_write(uint64_t at, const void *src, size_t len) TP_DBT_HIDDEN; /* -EFAULT */
/* The exit stub at @stub jumps to the block at @to from now on. */
void tp_dbt_chunk_link(uint64_t stub, uint64_t to) TP_DBT_HIDDEN;
/* Stubs whose target is in [@start, @end) go through the dispatcher again. */
void tp_dbt_chunks_unlink(uint64_t start, uint64_t end) TP_DBT_HIDDEN;
void tp_dbt_tables_clear(void) TP_DBT_HIDDEN;	  /* every thread's lookup table */
uint64_t tp_dbt_cache_epoch(void) TP_DBT_HIDDEN;  /* 1 + the flushes so far */
uint64_t tp_dbt_cache_reuses(void) TP_DBT_HIDDEN; /* chunks filled anew so far */

/* rt-cache.c */
int tp_dbt_cache_init(void) TP_DBT_HIDDEN;
/* The cache address of the block at program address @pc, translated now if needed; 0
 * after tp_dbt_fail(). */
uint64_t tp_dbt_lookup(uint64_t pc) TP_DBT_HIDDEN;
/* In a forked child: chunks of its own, copies of the parent's (which it shared). */
void tp_dbt_cache_forked(void) TP_DBT_HIDDEN;
/* rt-gate.c: the same, then the parent waiting on @sync may go on; the child goes on at cache
 * address @resume. */
void tp_dbt_fork_sync_done(uint32_t *sync, uint64_t resume) TP_DBT_HIDDEN;
uint64_t tp_dbt_dispatch_direct(uint64_t stub, struct tp_dbt_frame *f) TP_DBT_HIDDEN;
uint64_t tp_dbt_dispatch_indirect(uint64_t pc, struct tp_dbt_frame *f) TP_DBT_HIDDEN;

/* Translate @pc now if needed (any %fs); 0 after tp_dbt_fail(). */
uint64_t tp_dbt_translate(uint64_t pc) TP_DBT_HIDDEN;
/* Forget every translation (a flush). */
void tp_dbt_blocks_forget(void) TP_DBT_HIDDEN;
/* Forget the translations of program code in [@start, @end). */
void tp_dbt_invalidate(uint64_t start, uint64_t end) TP_DBT_HIDDEN;
/* @t goes on at cache address @at until its next dispatch (the gate, sigreturn). */
void tp_dbt_cache_pin(struct tp_dbt_thread *t, uint64_t at) TP_DBT_HIDDEN;
/* Is @pc in the cache or the runtime's own code? */
int tp_dbt_in_runtime(uint64_t pc) TP_DBT_HIDDEN;

/* rt-map.c, the mapping and breakpoint repositories (map-abi.h): the marks of the block
 * being translated (offsets from its start; @kind a TP_DBT_MK_*: where an instruction's
 * code begins, an exit stub, hidden code before the instruction at @prog_off, an indirect
 * branch's lookup), then its record, where breakpoints are planted; the program address
 * of a cache address, 0 when it has none. */
void tp_dbt_map_begin(void) TP_DBT_HIDDEN;
void tp_dbt_map_mark(size_t cache_off, uint64_t prog_off, int kind) TP_DBT_HIDDEN;
void tp_dbt_map_commit(uint64_t chunk, uint64_t chunk_rw, uint64_t cache, size_t len, uint64_t pc,
		       uint64_t end) TP_DBT_HIDDEN;
uint64_t tp_dbt_map_program_pc(uint64_t cache_pc) TP_DBT_HIDDEN;
/* A handler shown @shown for the interrupted @cache_pc set the pc to @pc, the address of
 * the int3 it trapped at (as a debugger does): go on at that int3's site, in the same
 * copy, whose count was taken at its block's entry. */
int tp_dbt_map_rewound(uint64_t cache_pc, uint64_t shown, uint64_t pc) TP_DBT_HIDDEN;
/* The program's bytes where a debugger wrote an int3 into code fetched at @pc. */
void tp_dbt_map_unbreak(uint64_t pc, uint8_t *code, size_t n) TP_DBT_HIDDEN;
/* Records of program code in [@start, @end) are stale (no breakpoint goes there). */
void tp_dbt_map_stale(uint64_t start, uint64_t end) TP_DBT_HIDDEN;
/* A forked child: repositories of its own; then each chunk's new writable view. */
void tp_dbt_map_forked(void) TP_DBT_HIDDEN;
/* A forked child of a debugged program (gdb detached it): its copy keeps no breakpoint. */
void tp_dbt_map_unbreak_all(void) TP_DBT_HIDDEN;
/* A breakpoint of the runtime's own at @pc, in every copy now and later (a forked child of a
 * debugged program stops there for the debugger, which removes it). */
void tp_dbt_map_break(uint64_t pc) TP_DBT_HIDDEN;
void tp_dbt_map_chunk(uint64_t chunk, uint64_t chunk_rw) TP_DBT_HIDDEN;
/* The chunk at @chunk is emptied to be filled again: its records go. */
void tp_dbt_map_reset(uint64_t chunk) TP_DBT_HIDDEN;

/* rt-smc.c: writable pages translated from are write-protected (code written at run time) */
void tp_dbt_smc_watch(uint64_t page) TP_DBT_HIDDEN; /* a block was translated from @page */
int tp_dbt_smc_fault(uint64_t addr) TP_DBT_HIDDEN;  /* a write faulted: 1 if it may go on */
void tp_dbt_smc_open(uint64_t start, uint64_t len) TP_DBT_HIDDEN;   /* the kernel writes there */
void tp_dbt_smc_forget(uint64_t start, uint64_t len) TP_DBT_HIDDEN; /* the program maps there */
/* Pages that @n system call arguments point into, opened if guarded. */
void tp_dbt_smc_open_args(const uint64_t *args, int n) TP_DBT_HIDDEN;

/* rt-signal.c */
#define TP_DBT_ALT_SIZE 0x10000ull
struct tp_ksigaction;
/* The thread's alternate stack to the kernel; the program's starts as @ss (NULL: none). */
void tp_dbt_sig_thread(struct tp_dbt_thread *t, const stack_t *ss) TP_DBT_HIDDEN;
/* sigaltstack(@ss, @old) on the program's behalf, its stack pointer being @sp. */
long tp_dbt_sigaltstack(struct tp_dbt_thread *t, uint64_t ss, uint64_t old,
			uint64_t sp) TP_DBT_HIDDEN;
/* SIGSEGV to the runtime first, whatever the program asks (rt-smc.c's faults); -1. */
int tp_dbt_sig_own_segv(void) TP_DBT_HIDDEN;
uint64_t tp_dbt_sig_handler(int sig) TP_DBT_HIDDEN; /* the program's handler, 0 for none */
void tp_dbt_sig_native(void) TP_DBT_HIDDEN; /* the kernel gets the program's handlers back */
long tp_dbt_sigaction(long sig, const struct tp_ksigaction *act, struct tp_ksigaction *oact,
		      long size) TP_DBT_HIDDEN;
uint64_t tp_dbt_sig_return(uint64_t rsp) TP_DBT_HIDDEN;
/* Around the runtime's C code: a signal deferred meanwhile is sent again at the end. */
static inline void tp_dbt_c_enter(struct tp_dbt_thread *t)
{
	__atomic_store_n(&t->in_c, 1, __ATOMIC_SEQ_CST);
	tp_dbt_lock();
}
void tp_dbt_c_leave(struct tp_dbt_thread *t) TP_DBT_HIDDEN;

/* rt-gate.c */
uint64_t tp_dbt_gate(uint64_t back, struct tp_dbt_frame *f) TP_DBT_HIDDEN;

/* rt-entry.S */
void tp_dbt_rt_enter(const struct tp_dbt_regs *r, uint64_t cache_pc) TP_DBT_HIDDEN;
void tp_dbt_rt_direct(void) TP_DBT_HIDDEN;
void tp_dbt_rt_ibl(void) TP_DBT_HIDDEN;
void tp_dbt_rt_miss(void) TP_DBT_HIDDEN;
void tp_dbt_rt_gate(void) TP_DBT_HIDDEN;
void tp_dbt_rt_sigtramp(void) TP_DBT_HIDDEN;
extern const char tp_dbt_rt_sigtramp_go[], tp_dbt_rt_sigtramp_end[] TP_DBT_HIDDEN;
__attribute__((noreturn)) void tp_dbt_rt_sigreturn(uint64_t rsp, uint64_t frame,
						   uint64_t prsp) TP_DBT_HIDDEN;
/* Out of the cache for good: arch_prctl(ARCH_SET_GS, @gs), then the program's registers in
 * @f (rcx: where it goes on). */
__attribute__((noreturn)) void tp_dbt_rt_leave(struct tp_dbt_frame *f, uint64_t gs) TP_DBT_HIDDEN;

/* The count's cell @k of @t, and its whole count. */
static inline uint64_t *tp_dbt_cell(struct tp_dbt_thread *t, int k)
{
	return k ? &t->cells[k - 1] : &t->count;
}

static inline uint64_t tp_dbt_count(struct tp_dbt_thread *t)
{
	uint64_t n = t->count;

	for (int k = 1; k < TP_DBT_NCELLS; k++)
		n += t->cells[k - 1];
	return n;
}

/* The count is @n from now on (in its first cell). */
static inline void tp_dbt_count_set(struct tp_dbt_thread *t, uint64_t n)
{
	for (int k = 1; k < TP_DBT_NCELLS; k++)
		t->cells[k - 1] = 0;
	t->count = n;
}

static inline struct tp_dbt_thread *tp_dbt_self(void)
{
	struct tp_dbt_thread *t;

	__asm__("mov %%gs:%c1, %0" : "=r"(t) : "i"(TP_DBT_T_SELF));
	return t;
}

#endif
