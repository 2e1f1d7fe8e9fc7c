/* What the ptrace engine's two files share (ptrace.c: the event loop and the stepping;
 * ptrace-stop.c: its breakpoints, the stepping of SIGTRAP-blocked threads, and leaving the
 * program as it was). */
#ifndef TP_COUNT_PTRACE_PRIV_H
#define TP_COUNT_PTRACE_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/hash.h"
#include "count/count-priv.h"
#include "proc/proc.h"

#define NO_PC UINT64_MAX

struct pthread {
	pid_t tid;
	bool counting, in_region, region_done, exec_done;
	bool at_exec; /* stepped from the exec stop: execve's exit is reported first */
	uint64_t region_ret, region_sp;
	uint64_t last_pc; /* resumed with STEP at this pc; NO_PC when nothing is pending */
	uint16_t last_mnem;
	uint8_t last_kind;
	uint64_t next_pc; /* where the last instruction falls through to, if it does */
	uint64_t late_pc; /* after a TP_INSN_F_LATE_STEP one: the next, which may run too */
	uint64_t count;
	struct tp_abp_ptrace *over; /* stepping over this breakpoint with the others stopped */
	/* The signal mask, as far as it matters for stepping (see tp_cpt_step()). */
	uint64_t mask;	    /* the thread's blocked signals, when !mask_check */
	bool mask_check;    /* it may have changed (a signal delivered, a syscall run) */
	bool unblocked;	    /* stepping with SIGTRAP unblocked: mask goes back at the stop */
	uint8_t in_syscall; /* run to its exit stop: 1 entry stop to come, 2 exit stop */
};

enum bp_kind { PBP_START, PBP_LSM, PBP_API_BEGIN };

struct tp_abp_ptrace {
	uint64_t addr;
	uint8_t orig;
	enum bp_kind kind;
	bool live;
};

/* decode cache of the tracer */
struct dc {
	uint64_t pc;
	uint16_t mnem;
	uint8_t kind, len, flags;
};

struct engine {
	struct tp_count_ctx *c;
	struct tp_proc *proc;
	pid_t pid;
	struct tp_hash threads; /* tid -> struct pthread * (stable while the run lasts) */
	struct dc *dc;
	size_t dc_mask;
	struct tp_abp_ptrace bps[4];
	int nbps;
	uint64_t agent_lo, agent_hi; /* agent text, once known */
	uint64_t start_pc, stop_pc, api_end_pc;
	uint64_t sync_pc;
	bool until_sync;   /* trapflag start-up: stop at the agent's sync int3 */
	uint64_t entry_pc; /* trapflag start-up without the agent: stop at the program's entry */
	bool synced;
	bool stepping_all;	   /* whole program: every thread is counted from the start */
	pid_t over_tid;		   /* the thread stepping over a breakpoint, others stopped */
	struct tp_event *deferred; /* events of other threads meanwhile, handled after it */
	size_t ndeferred, cap_deferred;
};

/* ptrace-stop.c */
int tp_cpt_bp_write(struct engine *e, struct tp_abp_ptrace *bp, bool on);
int tp_cpt_bp_insert(struct engine *e, uint64_t addr, enum bp_kind kind);
struct tp_abp_ptrace *tp_cpt_bp_at(struct engine *e, uint64_t addr);
/* Resume @t for its instruction of kind @kind (TP_INSN_*), as step() explains. */
int tp_cpt_step(struct engine *e, struct pthread *t, unsigned kind);
/* At each stop of @t, before anything else: its own signal mask back. */
void tp_cpt_mask_back(struct pthread *t);
/* Every thread stopped, the breakpoints' bytes and the masks back, the agent's sync int3s
 * disarmed, then detached. */
void tp_cpt_detach(struct engine *e);
/* The crash guard of the run (src/proc/guard.h). */
void tp_cpt_catch_fatal(struct engine *e);

#endif
