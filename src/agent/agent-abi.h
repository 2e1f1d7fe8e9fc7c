/* The shared-memory control block between the tracepad process and libtracepad-agent.so.
 * The tracepad process creates it (an anonymous memfd, inherited by the program; its fd
 * number is in TRACEPAD_AGENT_FD) and the agent maps it.  Both sides treat what the other
 * wrote as untrusted: every offset and count is checked against the mapping's size. */
#ifndef TP_AGENT_ABI_H
#define TP_AGENT_ABI_H

#include <stdint.h>

#define TP_AGENT_ENV_FD "TRACEPAD_AGENT_FD"
/* With `--trace`: the memfd of the trace store's rings (src/trace), where the agent records
 * events of its own threads.  Their classes are registered by tracepad in this order. */
#define TP_AGENT_ENV_TRACE_FD "TRACEPAD_TRACE_FD"
enum tp_agent_event {
	TP_AGENT_EV_COUNTING_BEGIN = 0, /* pc (where counting began), instructions (so far) */
	TP_AGENT_EV_COUNTING_END = 1,	/* pc (where it ended), instructions (of the thread) */
};
#define TP_AGENT_MAGIC 0x4c54435044415254ull /* "TRADPCTL" */
#define TP_AGENT_ABI 1
#define TP_AGENT_MNEMONICS 2048 /* > tp_arch_mnemonic_count() */
#define TP_AGENT_PATH_MAX 256

/* ctl->mode */
enum tp_agent_mode {
	TP_AGENT_PASSIVE = 0, /* only provide the tracepad_step_* symbols (ptrace engine) */
	TP_AGENT_COUNT = 1,   /* trap-flag instruction counting */
};

/* ctl->flags, set by tracepad */
#define TP_CTL_SYNC 0x01	 /* execute int3 in the constructor: a ptrace tracer is waiting */
#define TP_CTL_WHOLE 0x02	 /* count from the constructor to the exit (else: regions only) */
#define TP_CTL_BY_MNEMONIC 0x04	 /* per-thread mnemonic histograms */
#define TP_CTL_BY_ADDRESS 0x08	 /* address histogram (for --by function/object/address) */
#define TP_CTL_MAIN_DYNAMIC 0x10 /* start at main(), taken from __libc_start_main's 1st arg */
#define TP_CTL_API 0x20		 /* count between tracepad_step_begin() and tracepad_step_end() */
#define TP_CTL_SYNC2 0x40	 /* passive: int3 again once the agent's own set-up is done */

/* ctl->state bits, set by the agent */
#define TP_AGENT_ST_ACTIVE 0x01	       /* the agent took control */
#define TP_AGENT_ST_EXEC 0x02	       /* an execve was attempted while counting */
#define TP_AGENT_ST_FORKED 0x04	       /* a child was forked (it is not counted) */
#define TP_AGENT_ST_THREADS_FULL 0x08  /* more threads than slots: counted in the overflow */
#define TP_AGENT_ST_ERROR 0x10	       /* the agent gave up: see error[] */
#define TP_AGENT_ST_ORPHANED 0x20      /* tracer_pid died without detaching: agent disabled */
#define TP_AGENT_ST_EXEC_FOLLOWED 0x40 /* an execve went ahead with tracepad attached */

struct tp_agent_thread {
	int32_t tid;
	uint32_t flags;
	uint64_t count;
	/* the dbt runtime's block of the thread while it runs in this image (0: none): an
	 * interrupted tracepad reads there what the thread counted since its last flush */
	uint64_t block;
	uint64_t mnemonic[TP_AGENT_MNEMONICS];
};

struct tp_agent_map {
	uint64_t start, end, offset;
	char path[TP_AGENT_PATH_MAX];
};

struct tp_agent_addr {
	uint64_t pc; /* 0: empty */
	uint64_t count;
};

struct tp_agent_ctl {
	/* written by tracepad before the program starts */
	uint64_t magic;
	uint32_t abi;
	uint32_t mode;
	uint64_t size; /* bytes of the whole shared area */
	uint32_t flags;
	uint32_t pad0;
	uint64_t start_vaddr; /* link-time address in the main executable, 0 for none */
	uint64_t stop_vaddr;
	uint64_t threads_off; /* struct tp_agent_thread[max_threads] */
	uint32_t max_threads;
	uint32_t max_maps;
	uint64_t maps_off;  /* struct tp_agent_map[max_maps] */
	uint64_t addrs_off; /* struct tp_agent_addr[addr_slots], addr_slots a power of two */
	uint64_t addr_slots;

	/* written by the agent */
	uint32_t state;
	int32_t pid;
	uint32_t nthreads; /* slots handed out */
	uint32_t nmaps;
	uint64_t overflow_count;    /* instructions of threads beyond max_threads */
	uint64_t addr_dropped;	    /* instructions not in the address table (full) */
	uint64_t control_pc;	    /* where counting began (whole program: the return address) */
	uint64_t start_pc, stop_pc; /* runtime addresses of the region symbols */
	uint64_t agent_text[2];	    /* [start, end) of the agent's code */
	uint64_t step_begin_pc, step_end_pc; /* tracepad_step_begin/end in the agent */
	uint64_t sync_pc;		     /* address of the int3 of TP_CTL_SYNC */
	uint64_t sync2_pc;		     /* and of TP_CTL_SYNC2 */
	uint32_t maps_lock;
	uint32_t pad1;
	char error[256];
	uint64_t detach_pc; /* attach: tracepad_agent_detach(), which tracepad calls at the end */
	/* written by tracepad (launch): the process that reads this block; once it is gone the
	 * agent disables itself (attach passes it to tracepad_agent_attach instead) */
	int32_t tracer_pid;
	uint32_t pad2;
	/* Written by tracepad at an attach to a launched program stopped at its entry point: the
	 * instruction at this pc runs before the thread's first trap (the first trapping thread
	 * counts it and clears the field). */
	uint64_t handover_pc;
	/* An execve of the counted process that the dbt engine follows (src/count/dbt.c and
	 * src/dbt/rt-gate.c): tracepad sets exec_follow; the runtime, about to exec, writes its
	 * tid to exec_tid and waits; tracepad attaches, answers exec_ack = that tid (or -1: run
	 * the new image natively) and takes the new image over at its exec stop.  An execve
	 * that fails sets exec_failed, and tracepad lets the process go again. */
	uint32_t exec_follow;
	int32_t exec_tid;
	int32_t exec_ack;
	uint32_t exec_failed;
	/* Written by the agent: the first SIGTRAP it handed to the program's default action (the
	 * program dies of it), so that such a death says what the trap was.  fatal_traps counts
	 * them (the thread that set fatal_tid from 0 filled in the rest); si_addr is the raw
	 * union word (si_pid and si_uid for a sent one), rflags and the bytes around the pc as
	 * the thread had them. */
	uint32_t fatal_traps;
	int32_t fatal_tid;
	int32_t fatal_signo, fatal_code;
	uint64_t fatal_addr;
	uint64_t fatal_pc, fatal_rflags;
	uint8_t fatal_bytes[16]; /* from fatal_pc - 8; unreadable ones are 0 */
	uint32_t fatal_readable; /* bit i: fatal_bytes[i] was read */
	uint32_t pad3;
};

/* Region end test shared by both engines, so they count the same instructions: a region that
 * began at a function entry with stack pointer @entry_sp (where the return address lies)
 * ends once that return address is reached with the frame popped, or once the stack was
 * unwound above the frame (longjmp, exceptions) by less than 64 KiB (farther than that is
 * another stack, e.g. a signal handler on an alternate stack). */
static inline int tp_region_returned(uint64_t pc, uint64_t sp, uint64_t ret, uint64_t entry_sp)
{
	if (pc == ret && sp == entry_sp + 8)
		return 1;
	return sp > entry_sp + 8 && sp - entry_sp < 65536;
}

#endif
