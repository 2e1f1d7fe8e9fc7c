/* State shared by the agent's files.  Everything here runs inside the traced program: no
 * malloc, no stdio, no locks the program may hold; raw syscalls only (rt/raw.h). */
#ifndef TP_AGENT_PRIV_H
#define TP_AGENT_PRIV_H

#include <signal.h>
#include <stdint.h>
#include <ucontext.h>

#include "agent/agent-abi.h"
#include "arch/arch.h"
#include "rt/raw.h"
#include "rt/rt.h"
#include "trace/trace.h"

#define TP_EFLAGS_TF TP_RT_EFLAGS_TF
#define TP_HIDDEN __attribute__((visibility("hidden")))

/* Per-thread state, reached through initial-exec TLS without a lock. */
struct tp_tstate {
	uint32_t gen;		      /* tp_ag.gen when this state was made (see tp_tstate()) */
	struct tp_agent_thread *slot; /* NULL before the first count, or when slots ran out */
	uint8_t init;		      /* this thread was seen by the agent */
	uint8_t counting;	      /* its instructions are counted (its TF is set) */
	uint8_t region_done;	      /* its --start region was used up */
	uint8_t in_region;	      /* counting because of --start: ends at region_ret */
	uint8_t pending_fork;	      /* a fork-like syscall ran since the last trap */
	uint32_t pending_clone_flags;
	uint64_t region_ret, region_sp;
	/* inside a call into libZydis (its finalisers, which the loader runs at exit): stepped
	 * but not counted until it returns to hidden_ret with the stack at hidden_sp + 8 */
	uint64_t hidden_ret, hidden_sp;
	uint64_t pending; /* an instruction that ran without a trap of its own (after a syscall) */
	uint64_t late;	  /* the one after a TP_INSN_F_LATE_STEP (cpuid): it may run untrapped */
	uint64_t last_step; /* the pc at its last step's trap */
	uint8_t prod_state; /* 0: no ring yet, 1: prod is this thread's ring, 2: none to be had */
	uint16_t polls;	    /* traps since tracepad was last looked for (attach) */
	struct tp_trace_producer prod;
};

/* An in-process breakpoint with its out-of-line copy. */
enum tp_abp_kind { TP_ABP_START, TP_ABP_LIBC_START_MAIN };

struct tp_abp {
	uint64_t addr;
	uint8_t orig[TP_ARCH_MAX_INSN_LEN];
	struct tp_insn insn;
	enum tp_abp_kind kind;
	uint64_t slot;	    /* relocated copy of the instruction, followed by a jmp back */
	uint64_t slot_back; /* address of that jmp back in the slot */
	uint8_t live;
};

#define TP_AGENT_MAX_BPS 4
#define TP_AGENT_CLONE_SITES 8

struct tp_agent {
	struct tp_agent_ctl *ctl;
	uint64_t ctl_size;
	uint32_t flags;
	int active;   /* counting mode */
	int disabled; /* forked child, or the agent gave up: pass everything through */
	int pid;
	struct tp_agent_thread *threads;
	uint32_t max_threads;
	struct tp_agent_map *maps;
	uint32_t max_maps;
	struct tp_agent_addr *addrs;
	uint64_t addr_mask;
	uint64_t text_start, text_end;
	uint64_t zydis_start, zydis_end; /* libZydis's code, tracepad's as much as the agent's */
	uint64_t start_pc, stop_pc;
	uint64_t clone_sites[TP_AGENT_CLONE_SITES];
	struct tp_abp bps[TP_AGENT_MAX_BPS];
	int nbps;
	struct tp_trace_shm shm; /* with --trace: the rings */
	int tracing;
	/* Attach sessions (attach.c): each one a new generation of per-thread state, and a
	 * count of threads inside code that uses the control block, which tracepad waits to
	 * see at 0 before the block is unmapped. */
	uint32_t gen;
	int busy;
	int tracer;   /* tracepad's pid, looked at now and then (tp_agent_tracer_gone) */
	int orphaned; /* disabled by itself: tracepad died without detaching */
};

extern struct tp_agent tp_ag TP_HIDDEN;
extern __thread struct tp_tstate tp_ts TP_HIDDEN __attribute__((tls_model("initial-exec")));

/* The calling thread's state, started afresh in each attach session (the threads of an
 * earlier one still hold its slots and flags). */
static inline struct tp_tstate *tp_tstate(void)
{
	struct tp_tstate *ts = &tp_ts;

	if (ts->gen != tp_ag.gen) {
		__builtin_memset(ts, 0, sizeof(*ts));
		ts->gen = tp_ag.gen;
	}
	return ts;
}

/* Around code that uses the control block: 0 when the agent is disabled (do nothing then);
 * tp_agent_busy_exit() after either answer. */
static inline int tp_agent_busy_enter(void)
{
	__atomic_add_fetch(&tp_ag.busy, 1, __ATOMIC_SEQ_CST);
	return !__atomic_load_n(&tp_ag.disabled, __ATOMIC_SEQ_CST) && tp_ag.ctl;
}

static inline void tp_agent_busy_exit(void)
{
	__atomic_sub_fetch(&tp_ag.busy, 1, __ATOMIC_RELEASE);
}

/* entry.S */
void tracepad_step_begin(void);
void tracepad_step_end(void);
void tp_agent_sync(void) TP_HIDDEN;
void tp_agent_sync2(void) TP_HIDDEN;

/* attach.c */
/* Every so many traps of a thread: is the tracepad that attached the agent gone (killed
 * without detaching)?  Then the agent disables itself and the thread must drop TF. */
int tp_agent_tracer_gone(struct tp_tstate *ts) TP_HIDDEN;
/* /proc/@pid/fd/@fd, in @buf (at least 48 bytes). */
void tp_agent_fd_path(char *buf, int pid, int fd) TP_HIDDEN;
/* Map the shared block of fast tracepoints or call hooks: tracer @tracer's memfd @fd, named
 * @want ("/memfd:NAME"), that starts with a u64 @magic, a u32 @abi and (at byte 16) its u64
 * size, at most 4 GiB, given in *@size.  The block's address, or -1 (not the tracer's
 * block, or no memory). */
long tp_agent_map_block(int tracer, int fd, const char *want, uint64_t magic, uint32_t abi,
			uint64_t *size) TP_HIDDEN;

/* agent.c */
int tp_agent_gettid(void) TP_HIDDEN;
/* Map the control block of memfd @fd (closed once mapped): 0, -1 (not ours, @fd left open)
 * or -2 (mapped, but an offset or count is wrong). */
int tp_agent_ctl_map(int fd) TP_HIDDEN;
/* Record the agent's own text range in tp_ag and the control block. */
void tp_agent_find_text(void) TP_HIDDEN;
/* [start, end) of the executable segment of the object whose code holds @fn (unchanged when
 * none does). */
void tp_agent_text_of(const void *fn, uint64_t *start, uint64_t *end) TP_HIDDEN;
void tp_agent_fail(const char *msg) TP_HIDDEN;
struct tp_agent_thread *tp_agent_slot(void) TP_HIDDEN;
void tp_agent_addr_add(uint64_t pc, uint64_t n) TP_HIDDEN;

/* stepper.c */
/* Register the stepper with the SIGTRAP dispatcher and take SIGTRAP (rt's owner mode). */
int tp_stepper_install(void) TP_HIDDEN;
/* An attach session begins: forget what the code may have become since the last one. */
void tp_stepper_reset(void) TP_HIDDEN;
/* It ends, with no thread inside the stepper: let its memory go. */
void tp_stepper_release(void) TP_HIDDEN;
/* What the signal virtualisation asks the stepper (tp_rt_wrap_init, tp_rt_sig_init). */
extern const struct tp_rt_sig_host tp_stepper_sig_host TP_HIDDEN;
int tp_bp_insert(uint64_t addr, enum tp_abp_kind kind) TP_HIDDEN;
void tp_thread_start_counting(struct tp_tstate *ts) TP_HIDDEN;
void tp_agent_event(struct tp_tstate *ts, enum tp_agent_event ev, uint64_t pc) TP_HIDDEN;

/* zydis-shim.c */
int tp_zydis_load(void) TP_HIDDEN;
int tp_zydis_own_libc(void) TP_HIDDEN;

#endif
